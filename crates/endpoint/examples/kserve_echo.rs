//! A minimal KServe v2 server on 127.0.0.1 that answers every inference at once: the far end of
//! the load generator's speed benchmark (`scripts/bench_endpoint.py`), so that the figures are
//! the client's. Prints its port, then serves until killed.
//!
//!     cargo run --release -p capsim-endpoint --example kserve_echo

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const METADATA: &str =
    r#"{"name":"echo","inputs":[{"name":"input_ids","datatype":"INT64","shape":[-1,-1]}]}"#;

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.uri().path() {
        "/v2/models/echo" => METADATA,
        _ => r#"{"outputs":[]}"#,
    };
    Ok(Response::new(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        println!("{}", listener.local_addr().expect("address").port());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(answer))
                    .await;
            });
        }
    });
}
