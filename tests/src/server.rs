//! Real `redis-server` processes for tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming the `redis-server` binary to use.
pub const SERVER_BIN_ENV: &str = "LOCK_REDIS_SERVER_BIN";

const INSTALL_HINT: &str = "install it (Debian/Ubuntu: `apt-get install redis-server`), \
     set LOCK_REDIS_SERVER_BIN to its path, or run `scripts/test`, which installs it";

/// Finds the `redis-server` binary: `$LOCK_REDIS_SERVER_BIN`, else `PATH`.
///
/// # Panics
/// When none is found, with a message saying how to install it.
pub fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(SERVER_BIN_ENV) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{SERVER_BIN_ENV}={} is not a file; {INSTALL_HINT}",
            path.display()
        );
        return path;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("redis-server was not found on PATH; {INSTALL_HINT}"))
}

/// Options for [`RedisServer`].
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    persistence: bool,
    extra_args: Vec<String>,
    config: Option<String>,
    sentinel: bool,
    cluster: bool,
    tls: Option<TlsFiles>,
}

/// The files a TLS port needs, and the user clients log in as.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// The CA that signed it (PEM).
    pub ca: PathBuf,
}

impl ServerOptions {
    /// No persistence (the default): a restart starts empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep data across restarts with an append-only file, fsynced on every write.
    pub fn persistent(mut self) -> Self {
        self.persistence = true;
        self
    }

    /// Extra `redis-server` arguments, e.g. `["--maxmemory", "10mb"]`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Starts with this configuration file's text (written to the
    /// server's directory; command-line arguments still come after it).
    pub fn config(mut self, text: impl Into<String>) -> Self {
        self.config = Some(text.into());
        self
    }

    /// Runs as a Sentinel (`--sentinel`; give it a [`config`](Self::config)
    /// with the masters it monitors).
    pub fn sentinel(mut self) -> Self {
        self.sentinel = true;
        self
    }

    /// A Redis Cluster node (`--cluster-enabled yes`, on a port whose
    /// cluster bus port, 10,000 above it, is free too).
    pub fn cluster_node(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Also listens for TLS on [`RedisServer::tls_port`], with `files`.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }
}

/// A `redis-server` on a free loopback port in a temporary directory. Killed
/// when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    tls_port: Option<u16>,
    dir: tempfile::TempDir,
    options: ServerOptions,
    binary: PathBuf,
}

impl RedisServer {
    /// Starts a server with default options and waits until it answers.
    ///
    /// # Panics
    /// When `redis-server` cannot be found or does not start: a test that needs
    /// Redis fails loudly, it never skips.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts `n` independent servers.
    pub fn start_many(n: usize) -> Vec<Self> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// Starts a server with `options`.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(options: ServerOptions) -> Self {
        let binary = server_binary();
        let mut last_error = String::new();
        // A free port can be taken between probing and binding; try a few.
        for _ in 0..5 {
            let port = if options.cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            let mut server = RedisServer {
                child: None,
                port,
                tls_port: options.tls.as_ref().map(|_| free_port()),
                dir: tempfile::Builder::new()
                    .prefix("lock-redis-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("cannot create a temp dir for redis-server: {e}")),
                options: options.clone(),
                binary: binary.clone(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!(
            "redis-server ({}) did not start: {last_error}",
            binary.display()
        );
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(&self.binary);
        if let Some(config) = &self.options.config {
            let path = self.dir.path().join("server.conf");
            // Sentinel rewrites its file: write it only the first time.
            if !path.exists() {
                std::fs::write(&path, config)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
            cmd.arg(&path);
        }
        if self.options.sentinel {
            cmd.arg("--sentinel");
        }
        if self.options.cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
            ]);
        }
        if let (Some(files), Some(tls_port)) = (&self.options.tls, self.tls_port) {
            cmd.arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(&files.cert)
                .arg("--tls-key-file")
                .arg(&files.key)
                .arg("--tls-ca-cert-file")
                .arg(&files.ca)
                .args(["--tls-auth-clients", "no"]);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg("redis.log")
            .args(["--daemonize", "no", "--protected-mode", "no", "--save", ""]);
        if self.options.sentinel {
            // A Sentinel has no data of its own.
        } else if self.options.persistence {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        cmd.args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if ping(self.port) {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("exited with {status}; log: {}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("no answer within 10 s; log: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, when started with [`ServerOptions::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap_or_else(|e| panic!("bad url: {e}"))
    }

    /// A blocking connection, for checks in tests.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("cannot connect to redis on {}: {e}", self.port))
    }

    /// The server's version as `INFO server` reports it (`redis_version`;
    /// Valkey reports the Redis version it matches there, 7.2.4 for Valkey
    /// 8): `(major, minor, patch)`, for tests whose right outcome depends
    /// on it.
    ///
    /// # Panics
    /// When the server does not answer or does not say.
    pub fn version(&self) -> (u32, u32, u32) {
        let text = self.version_text();
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        match (parts.next(), parts.next(), parts.next()) {
            (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) => (major, minor, patch),
            _ => panic!("redis_version {text:?} is not major.minor.patch"),
        }
    }

    /// The `redis_version` of `INFO server`, as the server words it.
    ///
    /// # Panics
    /// When the server does not answer or does not say.
    pub fn version_text(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("INFO server on port {}: {e}", self.port));
        info.lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no redis_version in INFO server: {info}"))
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, signal: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("redis-server on port {} is not running", self.port));
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Stops the server cleanly (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        if self.child.is_some() {
            self.signal("CONT");
            self.signal("TERM");
            if let Some(mut child) = self.child.take() {
                let _ = child.wait();
            }
        }
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Starts the server again on the same port and directory (with its data
    /// when persistent), after stopping it if it runs.
    ///
    /// # Panics
    /// When it does not come back.
    pub fn restart(&mut self) {
        self.stop();
        // The port may linger briefly after exit.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => {
                    panic!("redis-server did not restart on port {}: {e}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free port whose cluster bus port (10,000 above) is free too.
fn free_cluster_port() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        let bus = u32::from(port) + 10_000;
        if let Ok(bus) = u16::try_from(bus)
            && TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, bus))).is_ok()
        {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port");
}

fn free_port() -> u16 {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("no local address: {e}"))
        .port()
}

/// Whether something answers `PING` with `+PONG` on the port.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    stream.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
