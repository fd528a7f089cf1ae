//! Scraping `/metrics`: one HTTP GET and the samples of an exposition (`metrics.rs`,
//! `share_groups.rs`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// One HTTP/1.1 GET (the test's own few lines: a scraper, not the server under test).
pub fn get(addr: SocketAddr, path: &str, accept: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    (head.to_string(), body.to_string())
}

/// The samples of an exposition: `name{labels}` (labels as written) to value.
pub fn samples(exposition: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

pub fn sample(all: &BTreeMap<String, f64>, series: &str) -> f64 {
    *all.get(series).unwrap_or_else(|| {
        panic!(
            "no sample {series} in {:#?}",
            all.keys().filter(|k| !k.contains("_bucket")).collect::<Vec<_>>()
        )
    })
}
