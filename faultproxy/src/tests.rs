//! Each mode against a real echo server over loopback. Times are only ever lower
//! bounds (a delay that must have been added) or "nothing arrived within a while":
//! a busy machine makes neither flaky.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Mode, Proxy};

/// An echo server; counts the bytes it received.
async fn echo() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let counted = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let got = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    got.fetch_add(n as u64, Ordering::Relaxed);
                    if s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, got)
}

async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).await.unwrap();
    back
}

/// Nothing arrives on `s` within `wait`.
async fn silent(s: &mut TcpStream, wait: Duration) {
    let mut one = [0u8; 1];
    let r = tokio::time::timeout(wait, s.read(&mut one)).await;
    assert!(r.is_err(), "something arrived: {r:?}");
}

/// `s` was reset (or at least closed) by the proxy.
async fn was_reset(s: &mut TcpStream) {
    let mut one = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut one))
        .await
        .expect("the connection stayed open");
    match r {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("read {n} bytes instead of a reset"),
    }
}

/// A new connection through `p` is reset: at its connect already (the RST can beat
/// the connect's own check), or at its first read.
async fn new_one_is_reset(p: &Proxy) {
    match TcpStream::connect(p.addr()).await {
        Ok(mut s) => was_reset(&mut s).await,
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
}

/// Waits until `f` holds (at most 10 s).
async fn until(mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "condition never held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_bytes_both_ways_and_counts_them() {
    let (up, _) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"hello").await, b"hello");
    let big = vec![7u8; 200_000];
    assert_eq!(round_trip(&mut s, &big).await, big);
    let st = p.stats();
    assert_eq!(
        (st.connections, st.up_bytes, st.down_bytes),
        (1, 200_005, 200_005)
    );
    assert_eq!((st.resets, st.dropped_bytes), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_reaches_the_server_and_its_answer_still_comes_back() {
    let (up, _) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    s.write_all(b"last words").await.unwrap();
    s.shutdown().await.unwrap();
    // The echo server reads to its end (so it saw the FIN), answers, and closes.
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut back))
        .await
        .expect("the server never saw the end of the stream")
        .unwrap();
    assert_eq!(back, b"last words");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_delays_each_direction_and_keeps_order() {
    let (up, _) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    p.set(Mode::Latency {
        delay: Duration::from_millis(150),
        jitter: Duration::from_millis(50),
    });
    let t = Instant::now();
    // Many small writes under jitter: order must hold.
    let mut want = Vec::new();
    for i in 0..50u8 {
        s.write_all(&[i]).await.unwrap();
        want.push(i);
    }
    let mut back = vec![0u8; want.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, want);
    // Up and down, each at least 100 ms (150 - 50).
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    p.set(Mode::Pass);
    assert_eq!(round_trip(&mut s, b"x").await, b"x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_accepts_answers_nothing_and_loses_nothing() {
    let (up, got) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut open = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"a").await, b"a");
    p.set(Mode::Blackhole);
    // A new connection is accepted; nothing reaches the server from either.
    let mut new = TcpStream::connect(p.addr()).await.unwrap();
    new.write_all(b"new").await.unwrap();
    open.write_all(b"old").await.unwrap();
    silent(&mut new, Duration::from_millis(300)).await;
    silent(&mut open, Duration::from_millis(10)).await;
    assert_eq!(got.load(Ordering::Relaxed), 1);
    // Lifted: what was held flows on, nothing lost.
    p.set(Mode::Pass);
    let mut back = [0u8; 3];
    new.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"new");
    open.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"old");
    assert_eq!(p.stats().resets, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_kills_open_and_new_connections_then_lets_them_through() {
    let (up, _) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut open = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"a").await, b"a");
    p.set(Mode::Reset);
    was_reset(&mut open).await;
    new_one_is_reset(&p).await;
    assert_eq!(p.stats().resets, 2);
    p.set(Mode::Pass);
    let mut again = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut again, b"b").await, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_answers_reach_the_server_and_their_connection_is_reset_after() {
    let (up, got) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"a").await, b"a");
    p.set(Mode::DropAnswers);
    s.write_all(b"credit").await.unwrap();
    // The server did the work...
    until(|| got.load(Ordering::Relaxed) == 7).await;
    // ...and its answer never came.
    silent(&mut s, Duration::from_millis(300)).await;
    until(|| p.stats().dropped_bytes == 6).await;
    // Lifted: the connection that lost an answer is reset, never resumed out of step.
    p.set(Mode::Pass);
    was_reset(&mut s).await;
    let mut again = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut again, b"b").await, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bandwidth_cap_slows_a_transfer_to_its_rate() {
    let (up, _) = echo().await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    p.set(Mode::Bandwidth {
        bytes_per_sec: 64 * 1024,
    });
    let data = vec![1u8; 64 * 1024];
    let t = Instant::now();
    assert_eq!(round_trip(&mut s, &data).await, data);
    // 64 KiB at 64 KiB/s each way (the directions overlap): at least about a second.
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_away_is_a_reset_and_a_dropped_proxy_closes_everything() {
    let (up, _) = echo().await;
    let away = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let p = Proxy::start(away).await.unwrap();
    new_one_is_reset(&p).await;
    let p = Proxy::start(up).await.unwrap();
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"a").await, b"a");
    drop(p);
    let mut one = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut one))
        .await
        .expect("the connection outlived its proxy");
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
}
