//! `/metrics` over HTTP/1.1 on `metrics.listen`, served by hyper (no HTTP parsing of ours).
//!
//! A scrape renders the exposition fresh; anything but `GET /metrics` is a 404 (a 405 for
//! another method there). Scrapers are few: at most `SCRAPE_CONNECTIONS_MAX` connections are
//! served at once (more wait in the kernel's backlog), each must send its headers within
//! `HEADER_READ_TIMEOUT`, and connections end at shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{Metrics, State};

/// Concurrent scrape connections served.
const SCRAPE_CONNECTIONS_MAX: usize = 16;
/// How long a scraper may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The exposition format Prometheus negotiates for; what `render` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus' classic text format, for clients that do not ask for OpenMetrics.
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `/metrics` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, state: Arc<State>, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(SCRAPE_CONNECTIONS_MAX));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let state = state.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let answer = answer(&metrics, &state, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(%peer, error = %e, "metrics connection ended");
                    }
                }
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

fn answer(metrics: &Metrics, state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let respond = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            // Prometheus asks for OpenMetrics; curl, promtool and older scrapers get the
            // classic text format.
            let openmetrics = req
                .headers()
                .get_all(hyper::header::ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            match openmetrics {
                true => respond(StatusCode::OK, OPENMETRICS, metrics.render(state)),
                false => respond(StatusCode::OK, TEXT, classic_text(&metrics.render(state))),
            }
        }
        (_, "/metrics") => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET /metrics\n".into(),
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "Sluice serves /metrics\n".into()),
    }
}

/// OpenMetrics text as Prometheus' classic text format: a counter family `x` (samples
/// `x_total`) is declared as `x_total`, and `# UNIT` and `# EOF` go. Everything else is the
/// same in both.
fn classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut lines = openmetrics.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        // A family's HELP comes before its TYPE: look ahead for a counter.
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            let counter = lines
                .peek()
                .is_some_and(|next| *next == format!("# TYPE {name} counter"));
            if counter {
                let help = &rest[name.len()..];
                out.push_str(&format!("# HELP {name}_total{help}\n# TYPE {name}_total counter\n"));
                lines.next();
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_declared_by_their_sample_name_in_the_classic_format() {
        let open = "# HELP a_bytes Bytes in\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\na_bytes_total 3\n\
                    # HELP g A gauge\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            classic_text(open),
            "# HELP a_bytes_total Bytes in\n# TYPE a_bytes_total counter\na_bytes_total 3\n\
             # HELP g A gauge\n# TYPE g gauge\ng 1\n"
        );
    }
}
