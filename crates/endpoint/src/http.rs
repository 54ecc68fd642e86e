//! A small HTTP/1.1 client over hyper: keep-alive connections, JSON bodies, whole responses, each
//! body chunk handed to a callback as it arrives (the caller times them).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Uri;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use capsim_sim::record::FailReason;

/// A response read whole: its status and body.
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// An HTTP/1.1 client with a pool of keep-alive connections.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        HttpClient {
            inner: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(usize::MAX)
                .build(connector),
        }
    }
}

impl HttpClient {
    /// `GET uri`, read whole.
    pub async fn get(&self, uri: &Uri) -> Result<Response, FailReason> {
        let request = hyper::Request::get(uri.clone())
            .body(Full::new(Bytes::new()))
            .map_err(|_| FailReason::Connect)?;
        self.send(request, |_| {}).await
    }

    /// `POST uri` with a JSON body, read whole; `on_chunk` sees each body chunk as it arrives
    /// (for streamed responses).
    pub async fn post_json(
        &self,
        uri: &Uri,
        body: Bytes,
        on_chunk: impl FnMut(&Bytes),
    ) -> Result<Response, FailReason> {
        let request = hyper::Request::post(uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|_| FailReason::Connect)?;
        self.send(request, on_chunk).await
    }

    async fn send(
        &self,
        request: hyper::Request<Full<Bytes>>,
        mut on_chunk: impl FnMut(&Bytes),
    ) -> Result<Response, FailReason> {
        let response = self
            .inner
            .request(request)
            .await
            .map_err(|_| FailReason::Connect)?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        let mut incoming: Incoming = response.into_body();
        while let Some(frame) = incoming.frame().await {
            let frame = frame.map_err(|_| FailReason::Stream)?;
            if let Ok(data) = frame.into_data() {
                on_chunk(&data);
                body.extend_from_slice(&data);
            }
        }
        Ok(Response {
            status,
            body: Bytes::from(body),
        })
    }
}
