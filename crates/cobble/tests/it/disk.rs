//! A `$PEBBLE` whose disk fails: full (a small tmpfs filled up) or forced read-only (a
//! loop-mounted ext4 with `errors=remount-ro` after an error). Every mutating request is
//! answered with the cause, never held while the disk fails, and not carried out; reads, health and running services
//! go on; the first request after the disk heals works; nothing acknowledged is lost, also
//! across a SIGKILL. The file systems need root and mount permission: where the machine
//! does not allow them, each test says why on stderr and passes without checking.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cobble_client::Method;

use crate::fixture::{Daemon, client, raw, rt, wait_for};

/// Past this, a request is held, not answered. A failing disk makes the daemon refuse, where
/// Pebble holds the request while it retries its write every three seconds for five minutes:
/// no answer in this long is such a hang, whatever the machine's load.
const HELD: Duration = Duration::from_secs(60);

const LAYER: &str = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";

/// A small file system mounted on a temporary directory, unmounted when dropped.
struct Disk {
    mount: PathBuf,
    /// The ext4 image behind a loop mount, and its error trigger in sysfs.
    ext4: Option<(PathBuf, PathBuf)>,
    _dir: tempfile::TempDir,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn skip(test: &str, reason: &str) {
    eprintln!("skipped {test}: {reason} (needs root and permission to mount file systems)");
}

impl Disk {
    /// A tmpfs of `size` (`8m`), or why there cannot be one.
    fn tmpfs(size: &str) -> Result<Disk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mount = dir.path().join("mnt");
        fs::create_dir(&mount).map_err(|e| e.to_string())?;
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                mount.to_str().unwrap(),
            ],
        )?;
        Ok(Disk {
            mount,
            ext4: None,
            _dir: dir,
        })
    }

    /// A 32 MiB ext4 on a loop device that turns read-only at its first error, or why
    /// there cannot be one.
    fn ext4() -> Result<Disk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("disk.img");
        let mount = dir.path().join("mnt");
        fs::create_dir(&mount).map_err(|e| e.to_string())?;
        fs::File::create(&image)
            .and_then(|f| f.set_len(32 << 20))
            .map_err(|e| e.to_string())?;
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()])?;
        let mut disk = Disk {
            mount,
            ext4: Some((image, PathBuf::new())),
            _dir: dir,
        };
        disk.mount_ext4()?;
        Ok(disk)
    }

    fn mount_ext4(&mut self) -> Result<(), String> {
        let (image, trigger) = self.ext4.as_mut().expect("an ext4 disk");
        run(
            "mount",
            &[
                "-o",
                "loop,errors=remount-ro",
                image.to_str().unwrap(),
                self.mount.to_str().unwrap(),
            ],
        )?;
        // The loop device the mount took names its ext4 directory in sysfs.
        let mounts = fs::read_to_string("/proc/self/mounts").map_err(|e| e.to_string())?;
        let device = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == self.mount.to_str())
            .and_then(|l| l.split(' ').next())
            .ok_or("the mount is not listed")?;
        let name = Path::new(device).file_name().unwrap().to_owned();
        *trigger = Path::new("/sys/fs/ext4")
            .join(name)
            .join("trigger_fs_error");
        if !trigger.exists() {
            return Err(format!("{} does not exist", trigger.display()));
        }
        Ok(())
    }

    /// Fills the file system to the last byte.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = fs::File::create(self.mount.join("filler")).expect("filler");
        let block = vec![0u8; 64 * 1024];
        loop {
            match filler.write(&block) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        // What is left is smaller than a block: fill it byte by byte.
        while filler.write(&[0]).is_ok_and(|n| n == 1) {}
    }

    fn free(&self) {
        fs::remove_file(self.mount.join("filler")).expect("remove filler");
    }

    /// Makes the kernel find an error on the ext4, which it then remounts read-only; open
    /// files stop taking writes too.
    fn break_read_only(&self) {
        let (_, trigger) = self.ext4.as_ref().expect("an ext4 disk");
        fs::write(trigger, "cobble test").expect("trigger an ext4 error");
        wait_for("the ext4 read-only", Duration::from_secs(10), || {
            fs::write(self.mount.join("probe"), "x").is_err()
        });
    }

    /// Unmounts the broken ext4, repairs it and mounts it again, as an operator would.
    fn repair(&mut self) {
        run("umount", &[self.mount.to_str().unwrap()]).expect("umount");
        let image = self.ext4.as_ref().unwrap().0.clone();
        // e2fsck exits 1 when it fixed something: not a failure.
        let _ = Command::new("e2fsck")
            .args(["-fy", image.to_str().unwrap()])
            .output();
        self.mount_ext4().expect("mount again");
    }
}

/// Ends every process whose `PEBBLE` is `pebble`: services a killed daemon left behind
/// whose record did not survive the disk (the process registry is not flushed to disk, so a
/// file system that aborts loses it).
fn end_services_of(pebble: &Path) {
    let wanted = format!("PEBBLE={}", pebble.display());
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        let ours = environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes());
        if ours && pid != std::process::id() as i32 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        end_services_of(&self.mount.join("pebble"));
        let _ = run("umount", &["-l", self.mount.to_str().unwrap()]);
    }
}

/// Sends one request, as [`raw`], and fails the test if it is held rather than answered.
fn answered(daemon: &Daemon, method: Method, path: &str, body: Option<&str>) -> (u16, String) {
    let c = client(daemon);
    let request = c.raw_request(method, path, body.map(|b| b.as_bytes().to_vec()));
    let response = rt()
        .block_on(async { tokio::time::timeout(HELD, request).await })
        .unwrap_or_else(|_| panic!("{path} held for {HELD:?} instead of answered"))
        .expect("request");
    (
        response.status_code,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

fn change_id(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).expect("JSON");
    value["change"].as_str().expect("a change ID").to_owned()
}

fn wait_change(daemon: &Daemon, id: &str) -> serde_json::Value {
    let (status, body) = raw(
        daemon,
        Method::GET,
        &format!("/v1/changes/{id}/wait?timeout=20s"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["result"].clone()
}

fn service_status(daemon: &Daemon) -> String {
    let (status, body) = raw(daemon, Method::GET, "/v1/services?names=s", None);
    assert_eq!(status, 200, "{body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    value["result"][0]["current"].as_str().unwrap().to_owned()
}

/// Every change ID a client was given is in the daemon's history.
fn assert_all_known(daemon: &Daemon, acknowledged: &[String]) {
    let (status, body) = raw(daemon, Method::GET, "/v1/changes?select=all", None);
    assert_eq!(status, 200, "{body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    let known: Vec<&str> = value["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in acknowledged {
        assert!(known.contains(&id.as_str()), "change {id} lost: {known:?}");
    }
}

/// Sends mutating requests until one is refused, as it is once the disk has no room even
/// for the journal's next record; returns the IDs acknowledged on the way.
fn until_refused(daemon: &Daemon, acknowledged: &mut Vec<String>) -> String {
    for _ in 0..200 {
        let (status, body) = answered(
            daemon,
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"start","services":["s"]}"#),
        );
        if status == 202 {
            acknowledged.push(change_id(&body));
            continue;
        }
        assert_eq!(status, 500, "{body}");
        return body;
    }
    panic!("a full disk never refused a request");
}

/// What a disk that refuses writes must not change: refused requests are answered, not
/// held, and not carried out; reads, health and the running service go on.
fn check_refusals(daemon: &Daemon, cause: &str, marker: &Path) {
    let refused = |method: Method, path: &str, body: &str, what: &str| {
        let (status, answer) = answered(daemon, method, path, Some(body));
        assert_eq!(status, 500, "{path}: {answer}");
        assert!(
            answer.contains(&format!("cannot record {what}: ")) && answer.contains(cause),
            "{path}: {answer}"
        );
    };
    refused(
        Method::POST,
        "/v1/services",
        r#"{"action":"stop","services":["s"]}"#,
        "change",
    );
    refused(
        Method::POST,
        "/v1/notices",
        r#"{"action":"add","type":"custom","key":"example.com/disk"}"#,
        "notice",
    );
    refused(
        Method::POST,
        "/v1/identities",
        r#"{"action":"add","identities":{"bob":{"access":"read","local":{"user-id":4242}}}}"#,
        "identities",
    );
    let exec = format!(
        r#"{{"command":["touch","{}"],"timeout":"5s"}}"#,
        marker.display()
    );
    refused(Method::POST, "/v1/exec", &exec, "change");
    // Reads and health answer as before, and nothing refused was done.
    for path in [
        "/v1/health",
        "/v1/changes?select=all",
        "/v1/checks",
        "/v1/notices",
    ] {
        let (status, body) = answered(daemon, Method::GET, path, None);
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, identities) = raw(daemon, Method::GET, "/v1/identities", None);
    assert!(!identities.contains("bob"), "{identities}");
    assert_eq!(service_status(daemon), "active", "the stop was carried out");
    // The refused exec's change was taken back, so no client can ever connect the
    // websockets its command waits for: it never runs.
    let (_, changes) = raw(daemon, Method::GET, "/v1/changes?select=all", None);
    let changes: serde_json::Value = serde_json::from_str(&changes).unwrap();
    let summaries: Vec<&str> = changes["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["summary"].as_str().unwrap())
        .collect();
    assert!(
        !summaries.iter().any(|s| s.contains("touch")),
        "the refused exec left a change: {summaries:?}"
    );
    assert!(!marker.exists(), "the refused exec ran");
}

#[test]
fn a_full_disk_refuses_changes_at_once_and_heals_without_a_restart() {
    let disk = match Disk::tmpfs("8m") {
        Ok(disk) => disk,
        Err(e) => return skip("a_full_disk_refuses_changes", &e),
    };
    let pebble = disk.mount.join("pebble");
    let mut daemon = Daemon::start_on(&pebble, &[("001-disk", LAYER)], &["--hold"]);
    let marker = daemon.scratch().join("exec-ran");
    let mut acknowledged = Vec::new();
    let (status, body) = raw(
        &daemon,
        Method::POST,
        "/v1/services",
        Some(r#"{"action":"start","services":["s"]}"#),
    );
    assert_eq!(status, 202, "{body}");
    acknowledged.push(change_id(&body));
    wait_change(&daemon, &acknowledged[0]);

    // A change still pending when the disk fills: an exec waiting for its websockets.
    let (status, body) = raw(
        &daemon,
        Method::POST,
        "/v1/exec",
        Some(r#"{"command":["sleep","100"],"timeout":"60s"}"#),
    );
    assert_eq!(status, 202, "{body}");
    let pending = change_id(&body);
    acknowledged.push(pending.clone());

    disk.fill();
    let first = until_refused(&daemon, &mut acknowledged);
    assert!(
        first.contains("cannot record change: ") && first.contains("no space left on device"),
        "{first}"
    );
    // An abort is a record too: refused, and not carried out.
    let (status, answer) = answered(
        &daemon,
        Method::POST,
        &format!("/v1/changes/{pending}"),
        Some(r#"{"action":"abort"}"#),
    );
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer.contains("cannot record change: ") && answer.contains("no space left on device"),
        "{answer}"
    );
    let (_, change) = raw(
        &daemon,
        Method::GET,
        &format!("/v1/changes/{pending}"),
        None,
    );
    assert!(!change.contains(r#""status":"Abort""#), "{change}");
    check_refusals(&daemon, "no space left on device", &marker);
    daemon.wait_log("Cannot write state file");

    // Room again: the very next request works, without a restart.
    disk.free();
    let (status, body) = answered(
        &daemon,
        Method::POST,
        "/v1/services",
        Some(r#"{"action":"stop","services":["s"]}"#),
    );
    assert_eq!(status, 202, "{body}");
    let stop = change_id(&body);
    acknowledged.push(stop.clone());
    assert_eq!(wait_change(&daemon, &stop)["status"], "Done");
    assert_eq!(service_status(&daemon), "inactive");
    let (status, body) = raw(
        &daemon,
        Method::POST,
        "/v1/notices",
        Some(r#"{"action":"add","type":"custom","key":"example.com/disk"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let (_, notices) = raw(
        &daemon,
        Method::GET,
        "/v1/notices?keys=example.com/disk",
        None,
    );
    assert!(
        notices.contains(r#""occurrences":1"#),
        "the refused notify counted: {notices}"
    );
    daemon.wait_log("written again");
    let log = daemon.log();
    assert_eq!(
        log.matches("Cannot write state file").count(),
        1,
        "once per episode:\n{log}"
    );
    assert_eq!(log.matches("written again").count(), 1, "{log}");

    // Nothing acknowledged is lost to a crash.
    daemon.kill();
    daemon.restart(&["--hold"]);
    assert_all_known(&daemon, &acknowledged);
}

#[test]
fn a_disk_forced_read_only_refuses_changes_at_once_and_loses_nothing_acknowledged() {
    let mut disk = match Disk::ext4() {
        Ok(disk) => disk,
        Err(e) => return skip("a_disk_forced_read_only", &e),
    };
    let pebble = disk.mount.join("pebble");
    let mut daemon = Daemon::start_on(&pebble, &[("001-disk", LAYER)], &["--hold"]);
    let marker = daemon.scratch().join("exec-ran");
    let mut acknowledged = Vec::new();
    for action in ["start", "restart"] {
        let (status, body) = raw(
            &daemon,
            Method::POST,
            "/v1/services",
            Some(&format!(r#"{{"action":"{action}","services":["s"]}}"#)),
        );
        assert_eq!(status, 202, "{body}");
        let id = change_id(&body);
        wait_change(&daemon, &id);
        acknowledged.push(id);
    }

    disk.break_read_only();
    check_refusals(&daemon, "read-only file system", &marker);
    daemon.wait_log("Cannot write state file");

    // The operator repairs the disk; a new daemon has every acknowledged change.
    daemon.kill();
    disk.repair();
    daemon.restart(&["--hold"]);
    assert_all_known(&daemon, &acknowledged);
}

/// `cobble run` on `daemon`'s directory as it is: its exit code if it stopped by itself
/// rather than start (None if it started, in which case it is stopped), and its stderr.
fn run_on(daemon: &Daemon) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cobble"))
        .args(["run", "--hold"])
        .env("PEBBLE", daemon.pebble_dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // One or the other, however loaded the machine: a daemon that neither stops nor answers
    // in this long is stuck.
    let deadline = Instant::now() + HELD;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            return (status.code(), stderr);
        }
        // The killed daemon's socket file is still there: only a new daemon answers on it.
        if std::os::unix::net::UnixStream::connect(daemon.pebble_dir().join(".pebble.socket"))
            .is_ok()
        {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cobble run neither stopped nor answered in {HELD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stopped as an operator stops it, so that all it logged reaches its stderr.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    (None, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Three acknowledged changes, then a SIGKILL: returns their IDs.
fn three_changes_then_killed() -> (Daemon, Vec<String>) {
    let mut daemon = Daemon::hold(&[("001-disk", LAYER)]);
    let ids = (0..3)
        .map(|_| {
            let (status, body) = raw(
                &daemon,
                Method::POST,
                "/v1/services",
                Some(r#"{"action":"stop","services":["s"]}"#),
            );
            assert_eq!(status, 202, "{body}");
            change_id(&body)
        })
        .collect();
    daemon.kill();
    (daemon, ids)
}

#[test]
fn an_emptied_state_file_is_never_started_from_silently() {
    let (mut daemon, ids) = three_changes_then_killed();
    let state = daemon.pebble_dir().join(".pebble.state");
    fs::write(&state, "").unwrap();
    let (code, stderr) = run_on(&daemon);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot load state file {}: it is empty",
            state.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains(".damaged"), "{stderr}");
    // Moved aside as the message says: the journal's changes are all there.
    fs::rename(&state, daemon.scratch().join("state.damaged")).unwrap();
    daemon.restart(&["--hold"]);
    assert_all_known(&daemon, &ids);
}

#[test]
fn an_emptied_halved_or_garbled_journal_is_never_replayed_silently() {
    for damage in ["empty", "garbage", "flipped", "halved"] {
        let (mut daemon, ids) = three_changes_then_killed();
        let journal = daemon.pebble_dir().join(".pebble.state.journal");
        let bytes = fs::read(&journal).unwrap();
        let damaged: Vec<u8> = match damage {
            "empty" => Vec::new(),
            "garbage" => b"\x7fELF garbage\n".to_vec(),
            "flipped" => {
                let mut b = bytes.clone();
                let at = b.len() - 10;
                b[at] ^= 0x20;
                b
            }
            _ => {
                // Half, but never on a record's end: a cut there leaves a whole journal of
                // fewer records, which no reader can tell from one that was never longer.
                let mut cut = bytes.len() / 2;
                if bytes[cut - 1] == b'\n' {
                    cut -= 1;
                }
                bytes[..cut].to_vec()
            }
        };
        fs::write(&journal, &damaged).unwrap();
        let (code, stderr) = run_on(&daemon);
        if damage == "halved" && code.is_none() {
            // Cut inside a record: what follows the cut reads as a write a crash
            // interrupted. It starts, and says so.
            assert!(stderr.contains("cut short"), "{stderr}");
            continue;
        }
        assert_eq!(code, Some(1), "{damage}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot load state journal {}", journal.display())),
            "{damage}: {stderr}"
        );
        if damage == "flipped" {
            // Cut where the message says: the records before the damaged one are used.
            let at: u64 = stderr
                .split("truncate -s ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect(&stderr);
            fs::OpenOptions::new()
                .write(true)
                .open(&journal)
                .unwrap()
                .set_len(at)
                .unwrap();
            daemon.restart(&["--hold"]);
            assert_all_known(&daemon, &ids[..2]);
        } else {
            // Moved aside as the message says: the daemon starts from the state file.
            fs::rename(&journal, daemon.scratch().join("journal.damaged")).unwrap();
            daemon.restart(&["--hold"]);
            assert_eq!(service_status(&daemon), "inactive");
        }
    }
}
