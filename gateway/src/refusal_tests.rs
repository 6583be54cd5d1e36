//! Unit tests of `refusal`, beside it so the module stays short: which
//! heads are taken for hyper's refusals, and what [`RefusalIo`] writes in
//! their place, over an in-memory pipe.

use super::*;
use crate::error::status_of;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

/// The head hyper writes for a refusal with `status_line`.
fn hyper_head(status_line: &str) -> String {
    format!("{status_line}\r\nconnection: close\r\ncontent-length: 0\r\ndate: {DATE}\r\n\r\n")
}

/// Writes `writes` through a [`RefusalIo`], flushing after each, then shuts
/// it down: what the client reads, to its end.
async fn through(writes: &[&[u8]]) -> Vec<u8> {
    let (server, mut client) = tokio::io::duplex(1 << 16);
    let mut io = RefusalIo::new(server);
    let serving = async {
        for write in writes {
            io.write_all(write).await.unwrap();
            io.flush().await.unwrap();
        }
        io.shutdown().await.unwrap();
    };
    let reading = async {
        let mut read = Vec::new();
        client.read_to_end(&mut read).await.unwrap();
        drop(client);
        read
    };
    tokio::join!(serving, reading).1
}

/// The body of one response in `bytes` whose head is exactly `head`.
fn body_after<'a>(bytes: &'a [u8], head: &str) -> &'a [u8] {
    let text = String::from_utf8_lossy(bytes);
    assert!(text.starts_with(head), "{text}");
    &bytes[head.len()..]
}

#[tokio::test]
async fn each_refusal_of_hypers_is_replaced_by_its_json_refusal_with_its_status() {
    for (status_line, code) in [
        ("HTTP/1.1 400 Bad Request", "gateway/bad-request"),
        ("HTTP/1.1 414 URI Too Long", "gateway/uri-too-long"),
        (
            "HTTP/1.1 431 Request Header Fields Too Large",
            "gateway/headers-too-large",
        ),
    ] {
        let read = through(&[hyper_head(status_line).as_bytes()]).await;
        let (_, held) = find_refusal(hyper_head(status_line).as_bytes()).unwrap();
        let status: u16 = status_line[9..12].parse().unwrap();
        assert_eq!(status_of(held.code).as_u16(), status);
        let text = String::from_utf8_lossy(&read).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head,
            format!(
                "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\ndate: {DATE}",
                body.len()
            )
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], code, "{text}");
        assert!(!json["message"].as_str().unwrap().is_empty());
    }
}

#[tokio::test]
async fn answers_before_the_refusal_in_the_same_write_go_out_first_unchanged() {
    let earlier = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\
                   date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n{}";
    let write = format!("{earlier}{}", hyper_head("HTTP/1.1 400 Bad Request"));
    let read = through(&[write.as_bytes()]).await;
    let rest = body_after(&read, earlier);
    let text = String::from_utf8_lossy(rest);
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"));
    assert!(text.ends_with("\"}"), "{text}");
}

#[tokio::test]
async fn a_matching_head_followed_by_more_output_goes_out_unchanged() {
    let head = hyper_head("HTTP/1.1 400 Bad Request");
    let read = through(&[head.as_bytes(), b"more"]).await;
    assert_eq!(read, format!("{head}more").into_bytes());
}

#[tokio::test]
async fn a_matching_head_followed_by_a_read_goes_out_unchanged() {
    let (server, mut client) = tokio::io::duplex(1 << 16);
    let mut io = RefusalIo::new(server);
    let head = hyper_head("HTTP/1.1 431 Request Header Fields Too Large");
    io.write_all(head.as_bytes()).await.unwrap();
    io.flush().await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut request = [0u8; 18];
    io.read_exact(&mut request).await.unwrap();
    let mut answer = vec![0u8; head.len()];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer, head.as_bytes());
}

#[test]
fn only_a_bodiless_head_with_hypers_headers_is_taken_for_a_refusal() {
    let refusal = hyper_head("HTTP/1.1 414 URI Too Long");
    assert!(find_refusal(refusal.as_bytes()).is_some());
    // HTTP/1.0 peers get no connection header.
    assert!(find_refusal(b"HTTP/1.0 400 Bad Request\r\ncontent-length: 0\r\n\r\n").is_some());
    for other in [
        // The router's refusals carry a content type and a body.
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
            .to_owned(),
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n\
         content-length: 0\r\n\r\n"
            .to_owned(),
        // A kept-alive answer is not hyper's refusal, nor another status,
        // another reason or a repeated header.
        "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n".to_owned(),
        hyper_head("HTTP/1.1 404 Not Found"),
        hyper_head("HTTP/1.1 400 Bad Thing"),
        hyper_head("HTTP/2.0 400 Bad Request"),
        format!("{}content-length: 0\r\n\r\n", &refusal[..refusal.len() - 2]),
        // A head must end the write.
        format!("{refusal}x"),
        String::new(),
    ] {
        assert!(find_refusal(other.as_bytes()).is_none(), "{other:?}");
    }
}

#[test]
fn the_longest_refusal_head_fits_the_search_window() {
    let head = hyper_head("HTTP/1.1 431 Request Header Fields Too Large");
    assert!(head.len() <= MAX_REFUSAL_HEAD);
    let mut after_a_large_answer = vec![b'x'; 100_000];
    after_a_large_answer.extend_from_slice(head.as_bytes());
    let (start, _) = find_refusal(&after_a_large_answer).unwrap();
    assert_eq!(start, 100_000);
}
