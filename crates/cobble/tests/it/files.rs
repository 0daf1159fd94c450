//! Files: push, pull, ls, mkdir and rm through the CLI and the Rust client, against a real
//! daemon, including the atomicity of writes.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use cobble_client::{Client, ClientConfig, PushOptions};

use crate::fixture::{Daemon, Test};

fn client(daemon: &Daemon) -> Client {
    Client::new(ClientConfig::socket(
        daemon.pebble_dir().join(".pebble.socket"),
    ))
    .expect("client")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Deterministic bytes that are not text.
fn binary(len: usize, seed: u8) -> Vec<u8> {
    let mut state = u32::from(seed) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

/// Names of temporary files (`*~`, `*.mkdir-new`) left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with('~') || n.ends_with(".mkdir-new"))
        .collect()
}

#[test]
fn cli_push_pull_ls_mkdir_rm_round_trip() {
    let daemon = Daemon::hold(&[]);
    let work = daemon.scratch().join("work");
    std::fs::create_dir(&work).unwrap();
    let local = daemon.scratch().join("local.bin");
    let content = binary(300_000, 7);
    std::fs::write(&local, &content).unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o640)).unwrap();
    let remote = work.join("sub/dir/remote.bin").display().to_string();

    // Without -p the parent must exist.
    Test::daemon(&daemon)
        .args(&["push", &local.display().to_string(), &remote])
        // The message names the temporary file, as Pebble's does. Its length varies with
        // the temporary names, so it is printed unwrapped (wide terminal) to match exactly.
        .env("COLUMNS", "1000")
        .stderr_glob("error: open */sub/dir/remote.bin.*~: no such file or directory\n")
        .status(1)
        .run();
    // With -p it is created; the local mode is kept.
    Test::daemon(&daemon)
        .args(&["push", "-p", &local.display().to_string(), &remote])
        .run();
    assert_eq!(std::fs::read(&remote).unwrap(), content);
    let mode = std::fs::metadata(&remote).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let parent_mode = std::fs::metadata(work.join("sub"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(parent_mode, 0o755);

    let pulled = daemon.scratch().join("pulled.bin");
    Test::daemon(&daemon)
        .args(&["pull", &remote, &pulled.display().to_string()])
        .run();
    assert_eq!(std::fs::read(&pulled).unwrap(), content);

    // A failed pull leaves no local file behind.
    let missing = daemon.scratch().join("missing.bin");
    Test::daemon(&daemon)
        .args(&[
            "pull",
            &format!("{}/nope", work.display()),
            &missing.display().to_string(),
        ])
        .stderr(&format!(
            "error: stat {}/nope: no such file or directory\n",
            work.display()
        ))
        .status(1)
        .run();
    assert!(!missing.exists());

    Test::daemon(&daemon)
        .args(&["mkdir", "-m", "700", &format!("{}/made", work.display())])
        .run();
    let made_mode = std::fs::metadata(work.join("made"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(made_mode, 0o700);
    Test::daemon(&daemon)
        .args(&["mkdir", &format!("{}/made", work.display())])
        .stderr(&format!(
            "error: mkdir {}/made: file exists\n",
            work.display()
        ))
        .status(1)
        .run();
    Test::daemon(&daemon)
        .args(&["mkdir", "-p", &format!("{}/made/a/b", work.display())])
        .run();

    Test::daemon(&daemon)
        .args(&["ls", &work.display().to_string()])
        .stdout("made\nsub\n")
        .run();
    Test::daemon(&daemon)
        .args(&["ls", &format!("{}/s*", work.display())])
        .stdout("sub\n")
        .run();
    Test::daemon(&daemon)
        .args(&["ls", "-d", &work.display().to_string()])
        .stdout("work\n")
        .run();
    Test::daemon(&daemon)
        .args(&[
            "ls",
            "-l",
            "--abs-time",
            &format!("{}/sub/dir", work.display()),
        ])
        .stdout_glob("-rw-r-----  root  root   300kB  ????-??-??T??:??:??Z  remote.bin\n")
        .run();
    Test::daemon(&daemon)
        .args(&["ls", "/no/such/dir"])
        .stderr("error: stat /no/such/dir: no such file or directory\n")
        .status(1)
        .run();

    Test::daemon(&daemon)
        .args(&["rm", &format!("{}/made", work.display())])
        .stderr(&format!(
            "error: remove {}/made: directory not empty\n",
            work.display()
        ))
        .status(1)
        .run();
    Test::daemon(&daemon)
        .args(&["rm", "-r", &format!("{}/made", work.display())])
        .run();
    assert!(!work.join("made").exists());
    Test::daemon(&daemon)
        .args(&["rm", "relative"])
        .stderr("error: paths must be absolute, got \"relative\"\n")
        .status(1)
        .run();
    assert!(leftovers(&work).is_empty());
}

#[test]
fn client_push_and_pull_large_binary_file() {
    let daemon = Daemon::hold(&[]);
    let path = daemon.scratch().join("big.bin").display().to_string();
    let content = binary(24 * 1024 * 1024 + 13, 3);
    let c = client(&daemon);
    let runtime = rt();
    let options = PushOptions {
        path: path.clone(),
        permissions: Some(0o600),
        ..Default::default()
    };
    runtime
        .block_on(c.push(&options, std::io::Cursor::new(content.clone())))
        .expect("push");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        content.len() as u64
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let mut pulled = Vec::new();
    let written = runtime.block_on(c.pull(&path, &mut pulled)).expect("pull");
    assert_eq!(written, content.len() as u64);
    assert!(pulled == content, "pulled content differs");

    let infos = runtime
        .block_on(c.list_files(&path, None, false))
        .expect("list");
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].size, Some(content.len() as u64));
    assert_eq!(infos[0].permissions, "600");
}

/// Regression: a push whose client goes away mid-body must leave the old content and no
/// temporary file.
#[test]
fn interrupted_push_keeps_old_content_and_leaves_no_temp_file() {
    let daemon = Daemon::hold(&[]);
    let dir = daemon.scratch().join("atomic");
    std::fs::create_dir(&dir).unwrap();
    let target = dir.join("f");
    std::fs::write(&target, "old content").unwrap();
    let path = target.display().to_string();
    let boundary = "0123456789abcdef0123456789abcdef";
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
         {{\"action\":\"write\",\"files\":[{{\"path\":\"{path}\"}}]}}\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"files\"; filename=\"{path}\"\r\n\r\n"
    );
    let mut stream = UnixStream::connect(daemon.pebble_dir().join(".pebble.socket")).unwrap();
    write!(
        stream,
        "POST /v1/files HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let mut send_chunk = |data: &[u8]| {
        write!(stream, "{:x}\r\n", data.len()).unwrap();
        stream.write_all(data).unwrap();
        stream.write_all(b"\r\n").unwrap();
    };
    send_chunk(head.as_bytes());
    let partial = vec![b'x'; 1024 * 1024];
    send_chunk(&partial);
    // The temporary file is open while the body streams in...
    crate::fixture::wait_for("a temporary file", Duration::from_secs(10), || {
        crate::fixture::has_file_open_in(daemon.pid(), &dir)
    });
    // ...and goes when the client does.
    drop(stream);
    crate::fixture::wait_for("the temporary file to go", Duration::from_secs(10), || {
        !crate::fixture::has_file_open_in(daemon.pid(), &dir) && leftovers(&dir).is_empty()
    });
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old content");
}

/// Readers of a file being replaced see the old or the new content, never a mix.
#[test]
fn readers_never_see_a_half_written_file() {
    let daemon = Daemon::hold(&[]);
    let target = daemon.scratch().join("swap.bin");
    let old = vec![b'a'; 4 * 1024 * 1024];
    let new = vec![b'b'; 4 * 1024 * 1024];
    std::fs::write(&target, &old).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (target, done) = (target.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let mut data = Vec::new();
                std::fs::File::open(&target)
                    .unwrap()
                    .read_to_end(&mut data)
                    .unwrap();
                assert_eq!(data.len(), 4 * 1024 * 1024, "a reader saw a partial file");
                assert!(
                    data.iter().all(|&b| b == data[0]),
                    "a reader saw mixed content"
                );
                reads += 1;
            }
            reads
        })
    };
    let c = client(&daemon);
    let runtime = rt();
    for round in 0..6 {
        let content = if round % 2 == 0 { &new } else { &old };
        let options = PushOptions {
            path: target.display().to_string(),
            ..Default::default()
        };
        runtime
            .block_on(c.push(&options, std::io::Cursor::new(content.clone())))
            .expect("push");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(reader.join().expect("reader") > 0);
}
