//! A `redis-server` that speaks TLS, with a certificate authority made for
//! the test (by the `openssl` command), and an ACL user with a password.
//!
//! ```no_run
//! use lock_tests::tls::TlsServer;
//!
//! let server = TlsServer::start();
//! let url = server.url(); // rediss://locks:<password>@127.0.0.1:<port>/
//! let ca = server.ca_pem(); // trust this to reach it
//! ```

use std::path::Path;
use std::process::Command;

use crate::{RedisServer, ServerOptions, TlsFiles};

/// The ACL user of a [`TlsServer`].
pub const USER: &str = "locks";
/// Its password.
pub const PASSWORD: &str = "s3cret-for-tests";

/// A server with a TLS port and an ACL user. Killed when dropped.
#[derive(Debug)]
pub struct TlsServer {
    server: RedisServer,
    ca: Vec<u8>,
    _dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run openssl ({e}); install it (Debian/Ubuntu: `apt-get install openssl`) \
                 or run `scripts/test`, which does"
            )
        });
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TlsServer {
    /// Makes a CA and a certificate for `127.0.0.1` and `localhost`, and
    /// starts a server with a TLS port and the ACL user [`USER`] (the
    /// default user stays, on the plain port, for the harness's checks).
    ///
    /// # Panics
    /// When `openssl` or `redis-server` cannot be run.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lock-tls-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"));
        let path = dir.path();
        openssl(
            path,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=lock-tests CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        );
        openssl(
            path,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        );
        std::fs::write(
            path.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap_or_else(|e| panic!("cannot write san.ext: {e}"));
        openssl(
            path,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                "server.crt",
            ],
        );
        let files = TlsFiles {
            cert: path.join("server.crt"),
            key: path.join("server.key"),
            ca: path.join("ca.crt"),
        };
        let server = RedisServer::start_with(
            ServerOptions::new()
                .tls(files)
                .arg("--user")
                .arg(USER)
                .arg("on")
                .arg(format!(">{PASSWORD}"))
                .arg("~*")
                .arg("&*")
                .arg("+@all"),
        );
        let ca = std::fs::read(path.join("ca.crt")).unwrap_or_else(|e| panic!("ca.crt: {e}"));
        TlsServer {
            server,
            ca,
            _dir: dir,
        }
    }

    /// `rediss://locks:<password>@127.0.0.1:<tls port>/`.
    pub fn url(&self) -> String {
        let port = self.server.tls_port().expect("a TLS port");
        format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}/")
    }

    /// The CA that signed the server's certificate, PEM.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca
    }

    /// The server (its plain port is for the harness).
    pub fn server(&self) -> &RedisServer {
        &self.server
    }
}
