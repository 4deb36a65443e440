//! The bootstrap server in this process, with client threads: fences,
//! values, authentication, and malformed input on a raw socket.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;

use navette_session::protocol::{self, Hello, MAX_FRAME, Reply, Request};
use navette_session::{Bootstrap, BootstrapError, BootstrapServer, JOB_KEY_LEN, LauncherClient};

const KEY: [u8; JOB_KEY_LEN] = [0x5a; JOB_KEY_LEN];

/// A server for `size` ranks whose every rank may be this process.
fn server(size: u32, job_id: u64) -> BootstrapServer {
    let server = BootstrapServer::start(size, job_id, KEY).expect("the server starts");
    for rank in 0..size {
        server.admit(rank, std::process::id());
    }
    server.close_admissions();
    server
}

fn unique_id(n: u64) -> u64 {
    (u64::from(std::process::id()) << 16) ^ n ^ 0x7e57_0000_0000_0000
}

fn connect(
    server: &BootstrapServer,
    rank: u32,
    size: u32,
    key: [u8; JOB_KEY_LEN],
) -> Result<LauncherClient, BootstrapError> {
    LauncherClient::connect_to(server.socket_path(), rank, size, 1, key)
}

fn raw_hello(server: &BootstrapServer, rank: u32) -> UnixStream {
    let mut s = UnixStream::connect(server.socket_path()).unwrap();
    let hello = Request::Hello(Hello { rank, job_key: KEY })
        .encode()
        .unwrap();
    protocol::write_frame(&mut s, &hello).unwrap();
    assert_eq!(read_reply(&mut s), Some(Reply::Welcome));
    s
}

fn read_reply(s: &mut UnixStream) -> Option<Reply> {
    protocol::read_frame(s)
        .ok()
        .flatten()
        .map(|body| Reply::decode(&body).unwrap())
}

#[test]
fn fences_and_values_across_client_threads() {
    const SIZE: u32 = 6;
    let server = server(SIZE, unique_id(1));
    std::thread::scope(|s| {
        for rank in 0..SIZE {
            let server = &server;
            s.spawn(move || {
                let b = connect(server, rank, SIZE, KEY).expect("a rank connects");
                for round in 0..5u32 {
                    b.put("v", &[rank as u8, round as u8]).unwrap();
                    b.fence().unwrap();
                    for r in 0..SIZE {
                        assert_eq!(b.get(r, "v").unwrap(), [r as u8, round as u8]);
                    }
                    b.fence().unwrap();
                }
                assert!(matches!(
                    b.get(0, "absent"),
                    Err(BootstrapError::Missing { rank: 0, .. })
                ));
                assert!(matches!(b.get(SIZE, "v"), Err(BootstrapError::Server(_))));
            });
        }
    });
    assert!(server.refusals().is_empty(), "{:?}", server.refusals());
}

#[test]
fn the_socket_is_private_and_removed_at_shutdown() {
    let server = server(1, unique_id(2));
    let path = server.socket_path().to_owned();
    let dir = path.parent().unwrap().to_owned();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert!(
        dir.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("navette-")
    );
    server.shutdown();
    assert!(!path.exists());
    assert!(!dir.exists());
}

#[test]
fn a_bad_job_key_is_refused() {
    let server = server(2, unique_id(3));
    let mut bad = KEY;
    bad[7] ^= 0x80;
    match connect(&server, 0, 2, bad) {
        Err(BootstrapError::Refused(reason)) => assert!(reason.contains("key"), "{reason}"),
        other => panic!("a bad key gave {other:?}"),
    }
    assert_eq!(server.refusals().len(), 1);
    assert!(server.refusals()[0].contains("wrong job key"));
    // The rank can still connect with the right key.
    connect(&server, 0, 2, KEY).expect("the right key is accepted");
}

#[test]
fn unknown_processes_wrong_ranks_and_second_connections_are_refused() {
    let server = BootstrapServer::start(3, unique_id(4), KEY).unwrap();
    server.admit(1, std::process::id());
    server.close_admissions();
    // This process may be rank 1 only.
    match connect(&server, 0, 3, KEY) {
        Err(BootstrapError::Refused(reason)) => assert!(reason.contains("not rank 0"), "{reason}"),
        other => panic!("a wrong rank gave {other:?}"),
    }
    let _rank1 = connect(&server, 1, 3, KEY).unwrap();
    assert!(matches!(
        connect(&server, 1, 3, KEY),
        Err(BootstrapError::Refused(_))
    ));
    match connect(&server, 5, 3, KEY) {
        Err(BootstrapError::Refused(reason)) => {
            assert!(reason.contains("below the size"), "{reason}")
        }
        other => panic!("an out-of-range rank gave {other:?}"),
    }
    assert_eq!(server.refusals().len(), 3);

    // A server that admitted nobody refuses everybody.
    let empty = BootstrapServer::start(1, unique_id(5), KEY).unwrap();
    empty.close_admissions();
    match connect(&empty, 0, 1, KEY) {
        Err(BootstrapError::Refused(reason)) => assert!(reason.contains("not a rank"), "{reason}"),
        other => panic!("an unknown process gave {other:?}"),
    }
}

#[test]
fn malformed_hellos_are_refused_without_harm() {
    let server = server(2, unique_id(6));
    let bodies: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x42, 1, 2, 3],
        Request::Fence.encode().unwrap(),
        Request::Hello(Hello {
            rank: 0,
            job_key: KEY,
        })
        .encode()
        .unwrap()[..20]
            .to_vec(),
    ];
    for body in bodies {
        let mut s = UnixStream::connect(server.socket_path()).unwrap();
        protocol::write_frame(&mut s, &body).unwrap();
        assert!(
            matches!(read_reply(&mut s), Some(Reply::Refused(_))),
            "{body:?}"
        );
        assert_eq!(
            read_reply(&mut s),
            None,
            "the server closes after a refusal"
        );
    }
    // An announced frame longer than the limit, and a connection that
    // closes at once.
    let mut s = UnixStream::connect(server.socket_path()).unwrap();
    s.write_all(&((MAX_FRAME + 1) as u32).to_le_bytes())
        .unwrap();
    assert!(matches!(read_reply(&mut s), Some(Reply::Refused(_))));
    drop(UnixStream::connect(server.socket_path()).unwrap());
    // The job goes on.
    let a = connect(&server, 0, 2, KEY).unwrap();
    let b = connect(&server, 1, 2, KEY).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| a.fence().unwrap());
        b.fence().unwrap();
    });
}

#[test]
fn a_bad_request_closes_only_its_connection() {
    let server = server(2, unique_id(7));
    let mut raw = raw_hello(&server, 0);
    // A put announcing a value longer than allowed.
    let mut body = vec![0x02, 1, 0, b'k'];
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    protocol::write_frame(&mut raw, &body).unwrap();
    assert!(matches!(read_reply(&mut raw), Some(Reply::Failed(e)) if e.contains("value")));
    let mut rest = Vec::new();
    assert_eq!(raw.read_to_end(&mut rest).unwrap(), 0, "the server closed");
    // Rank 0 has left: rank 1 can still put and get, but a fence fails
    // instead of waiting forever.
    let b = connect(&server, 1, 2, KEY).unwrap();
    b.put("k", b"v").unwrap();
    assert_eq!(b.get(1, "k").unwrap(), b"v");
    match b.fence() {
        Err(BootstrapError::Server(reason)) => assert!(reason.contains("rank 0 left"), "{reason}"),
        other => panic!("a fence without rank 0 gave {other:?}"),
    }
}

#[test]
fn a_socket_that_never_answers_the_hello_is_an_error() {
    let dir = std::env::temp_dir().join(format!("navette-mute-{}", unique_id(12)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mute.sock");
    // Accepts the connection, then says nothing.
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let result =
        LauncherClient::connect_within(&path, 0, 1, 1, KEY, std::time::Duration::from_millis(50));
    match result {
        Err(BootstrapError::Server(why)) => assert!(why.contains("no answer"), "{why}"),
        other => panic!("a mute socket gave {other:?}"),
    }
    drop(held.join());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_job_too_large_for_one_server_is_refused() {
    use navette_session::server::MAX_RANKS;
    match BootstrapServer::start(MAX_RANKS + 1, unique_id(11), KEY) {
        Err(BootstrapError::Server(why)) => assert!(why.contains("at most"), "{why}"),
        other => panic!("{} ranks gave {other:?}", MAX_RANKS + 1),
    }
}

#[test]
fn a_rank_cut_off_inside_a_frame_leaves() {
    let server = server(2, unique_id(10));
    let mut raw = raw_hello(&server, 0);
    // Half of a frame's length, then the end of the connection (a rank
    // killed while it wrote): no reply is owed, and rank 0 has left.
    raw.write_all(&[8, 0]).unwrap();
    raw.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    assert_eq!(raw.read_to_end(&mut rest).unwrap(), 0, "closed, no reply");
    let b = connect(&server, 1, 2, KEY).unwrap();
    match b.fence() {
        Err(BootstrapError::Server(reason)) => assert!(reason.contains("rank 0 left"), "{reason}"),
        other => panic!("a fence without rank 0 gave {other:?}"),
    }
}

#[test]
fn oversized_client_calls_fail_before_sending() {
    let server = server(1, unique_id(8));
    let b = connect(&server, 0, 1, KEY).unwrap();
    assert!(matches!(
        b.put(&"k".repeat(257), b""),
        Err(BootstrapError::Protocol(_))
    ));
    assert!(matches!(
        b.put("k", &vec![0; (64 << 10) + 1]),
        Err(BootstrapError::Protocol(_))
    ));
    assert!(matches!(
        b.get(0, &"k".repeat(300)),
        Err(BootstrapError::Protocol(_))
    ));
    b.put("k", &vec![1; 64 << 10]).unwrap();
    b.fence().unwrap();
    assert_eq!(b.get(0, "k").unwrap().len(), 64 << 10);
}

#[test]
fn shutdown_fails_pending_fences() {
    let server = server(2, unique_id(9));
    let a = connect(&server, 0, 2, KEY).unwrap();
    let _b = connect(&server, 1, 2, KEY).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| a.fence());
        // Shut down while rank 0 may or may not be waiting: either way
        // its fence ends with an error, never a hang.
        server.shutdown();
        assert!(waiter.join().unwrap().is_err());
    });
}
