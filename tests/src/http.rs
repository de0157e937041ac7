//! Real HTTP for end-to-end tests: serve an axum app on 127.0.0.1:0 and talk
//! to it with a hyper client over a real socket.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A running server; aborted when dropped.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Serves `app` (with `ConnectInfo<SocketAddr>`) on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(app: axum::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cannot bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("no address: {e}"));
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            if let Err(e) = axum::serve(listener, app).await {
                panic!("server failed: {e}");
            }
        });
        TestServer { addr, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP/1 client with a connection pool.
#[derive(Clone, Debug)]
pub struct TestClient {
    client: Client<HttpConnector, Empty<Bytes>>,
}

/// What came back.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Default for TestClient {
    fn default() -> Self {
        Self::new()
    }
}

impl TestClient {
    /// A new client.
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        TestClient {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(256)
                .build(connector),
        }
    }

    /// Sends `method url` with `headers`, within 30 s.
    ///
    /// # Panics
    /// On a transport error or after 30 s: the tests treat both as failures.
    pub async fn send(&self, method: &str, url: &str, headers: &[(&str, &str)]) -> Reply {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        self.send_bytes(method, url, &headers).await
    }

    /// As [`send`](Self::send), with header values of any bytes (not only
    /// text).
    ///
    /// # Panics
    /// As [`send`](Self::send), and for a value HTTP cannot carry at all
    /// (a line break).
    pub async fn send_bytes(&self, method: &str, url: &str, headers: &[(&str, &[u8])]) -> Reply {
        let mut builder = Request::builder().method(method).uri(url);
        for (k, v) in headers {
            let value =
                http::HeaderValue::from_bytes(v).unwrap_or_else(|e| panic!("header {k}: {e}"));
            builder = builder.header(*k, value);
        }
        let request = builder
            .body(Empty::new())
            .unwrap_or_else(|e| panic!("bad request: {e}"));
        let exchange = async {
            let response = self.client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Reply {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(Duration::from_secs(30), exchange).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => panic!("{method} {url}: {e}"),
            Err(_) => panic!("{method} {url}: no answer within 30 s"),
        }
    }

    /// `GET url` with `headers`.
    pub async fn get(&self, url: &str, headers: &[(&str, &str)]) -> Reply {
        self.send("GET", url, headers).await
    }
}

/// Starts an actix-web app on its own thread; returns its address.
pub fn actix<F, T, B>(factory: F) -> std::net::SocketAddr
where
    F: Fn() -> actix_web::App<T> + Send + Clone + 'static,
    T: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: actix_web::body::MessageBody + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = actix_web::HttpServer::new(factory)
                .workers(1)
                .disable_signals()
                .bind(("127.0.0.1", 0))
                .expect("bind");
            let addr = server.addrs()[0];
            tx.send(addr).expect("send");
            server.run().await.expect("run");
        });
    });
    rx.recv().expect("actix server address")
}
