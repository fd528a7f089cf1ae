//! A broker whose disk fills up or fails: a tmpfs of a chosen size, or an ext4 volume on a
//! loop device that can be made to fail, as its data directory (mounting needs root, which CI
//! has; elsewhere the tests print SKIP), and the writes that fill it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};

/// A tmpfs mounted on a directory; unmounted when dropped.
pub struct Tmpfs {
    path: PathBuf,
    /// The directory made for it by `mount`, removed after the unmount.
    _made: Option<tempfile::TempDir>,
}

impl Tmpfs {
    /// A tmpfs of `mib` MiB on a fresh directory; None, with the reason printed, where this
    /// process may not mount.
    pub fn mount(mib: u32) -> Option<Tmpfs> {
        let made = tempfile::tempdir().unwrap();
        let path = made.path().to_path_buf();
        mount_tmpfs(&path, mib).then_some(Tmpfs {
            path,
            _made: Some(made),
        })
    }

    /// A tmpfs of `mib` MiB mounted over `dir`, holding what `dir` held (a stopped node's data
    /// directory moves onto it).
    pub fn mount_over(dir: &Path, mib: u32) -> Option<Tmpfs> {
        move_onto(dir, || mount_tmpfs(dir, mib)).then(|| Tmpfs {
            path: dir.to_path_buf(),
            _made: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Grows (or shrinks) the filesystem, as an operator gives a full volume more room.
    pub fn resize(&self, mib: u32) {
        run(
            "mount",
            &[
                "-o".as_ref(),
                format!("remount,size={mib}m").as_ref(),
                self.path.as_os_str(),
            ],
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// An ext4 filesystem in a sparse image file, loop-mounted on a directory, that a test can
/// make fail as a dying disk does (`fail`); unmounted, and its image removed, when dropped.
pub struct Ext4 {
    path: PathBuf,
    image: tempfile::TempDir,
}

impl Ext4 {
    /// An ext4 volume of `mib` MiB mounted over `dir`, holding what `dir` held (a stopped
    /// node's data directory moves onto it); None, with the reason printed, where this process
    /// may not make or mount one.
    pub fn mount_over(dir: &Path, mib: u32) -> Option<Ext4> {
        let image = tempfile::tempdir().unwrap();
        let file = image.path().join("ext4.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(u64::from(mib) << 20)
            .unwrap();
        let made = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&file).output();
        match made {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                println!("SKIP: mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr).trim());
                return None;
            }
            Err(e) => {
                println!("SKIP: cannot run mkfs.ext4: {e}");
                return None;
            }
        }
        let mounted = move_onto(dir, || {
            try_mount(
                &[
                    "-t".as_ref(),
                    "ext4".as_ref(),
                    "-o".as_ref(),
                    "loop".as_ref(),
                    file.as_os_str(),
                    dir.as_os_str(),
                ],
                "an ext4 loop volume",
            )
        });
        mounted.then(|| Ext4 {
            path: dir.to_path_buf(),
            image,
        })
    }

    /// The device dies: every read, write and fsync on the volume fails with EIO from now on,
    /// and what was not yet on the device is lost (ext4's shutdown ioctl without a journal
    /// flush, as xfstests' `godown` uses it). Only acknowledged, fsynced data stays.
    pub fn fail(&self) {
        // EXT4_IOC_SHUTDOWN, _IOR('X', 125, __u32); EXT4_GOING_FLAGS_NOLOGFLUSH.
        const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
        const NOLOGFLUSH: u32 = 2;
        let dir = std::fs::File::open(&self.path).unwrap();
        let flags = NOLOGFLUSH;
        // SAFETY: the descriptor is open for the call, and the flags word outlives it.
        let done = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&dir), EXT4_IOC_SHUTDOWN, &flags) };
        assert_eq!(done, 0, "EXT4_IOC_SHUTDOWN: {}", std::io::Error::last_os_error());
    }

    /// The failed device comes back (a replaced disk holding what reached the old one): the
    /// volume is unmounted and mounted again, its journal replayed.
    pub fn replace(&self) {
        run("umount", &[self.path.as_os_str()]);
        let file = self.image.path().join("ext4.img");
        run(
            "mount",
            &[
                "-t".as_ref(),
                "ext4".as_ref(),
                "-o".as_ref(),
                "loop".as_ref(),
                file.as_os_str(),
                self.path.as_os_str(),
            ],
        );
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Moves what `dir` holds onto the filesystem `mount` puts over it (false, leaving `dir` as it
/// was, when the mount fails).
fn move_onto(dir: &Path, mount: impl FnOnce() -> bool) -> bool {
    let saved = tempfile::tempdir().unwrap();
    run(
        "cp",
        &["-a".as_ref(), dir.join(".").as_os_str(), saved.path().as_os_str()],
    );
    if !mount() {
        return false;
    }
    run(
        "cp",
        &["-a".as_ref(), saved.path().join(".").as_os_str(), dir.as_os_str()],
    );
    // On the new disk before the node starts: a disk that fails later keeps the copy.
    run("sync", &["-f".as_ref(), dir.as_os_str()]);
    true
}

fn mount_tmpfs(dir: &Path, mib: u32) -> bool {
    try_mount(
        &[
            "-t".as_ref(),
            "tmpfs".as_ref(),
            "-o".as_ref(),
            format!("size={mib}m").as_ref(),
            "tmpfs".as_ref(),
            dir.as_os_str(),
        ],
        "a tmpfs",
    )
}

/// `mount` with `args`; false, with the reason printed as a SKIP, where it fails.
fn try_mount(args: &[&std::ffi::OsStr], what: &str) -> bool {
    let out = Command::new("mount").args(args).output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            println!(
                "SKIP: cannot mount {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            println!("SKIP: cannot run mount: {e}");
            false
        }
    }
}

fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// Writes `path` until the filesystem holding it is full.
pub fn fill_up(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    while std::io::Write::write_all(&mut file, &block).is_ok() {}
}

/// Sends `count` records of 10 KiB numbered from `first` (the number in their first six
/// bytes) to partition 0 of `topic`, all at once; returns the acknowledged ones as (offset,
/// number) and the errors of the others.
pub async fn send_numbered(
    producer: &FutureProducer,
    topic: &str,
    first: usize,
    count: usize,
) -> (Vec<(i64, usize)>, Vec<String>) {
    let sends: Vec<_> = (first..first + count)
        .map(|i| {
            let value = format!("{i:06}{}", "x".repeat(10 * 1024));
            let producer = producer.clone();
            let topic = topic.to_owned();
            async move {
                let sent = producer
                    .send(
                        FutureRecord::<(), _>::to(&topic).payload(&value).partition(0),
                        Duration::from_secs(60),
                    )
                    .await;
                (i, sent.map(|d| d.offset).map_err(|(e, _)| e.to_string()))
            }
        })
        .collect();
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for (i, sent) in futures::future::join_all(sends).await {
        match sent {
            Ok(offset) => acked.push((offset, i)),
            Err(e) => failed.push(e),
        }
    }
    acked.sort();
    (acked, failed)
}

/// Reads partition 0 of `topic` from the start until `count` records written by
/// `send_numbered` are in (or 30 s have passed): (offset, number) of each, in log order.
pub fn read_numbered(bootstrap: &str, topic: &str, count: usize) -> Vec<(i64, usize)> {
    let consumer = super::consumer(bootstrap, &[]);
    super::assign(&consumer, topic, &[0], rdkafka::Offset::Beginning);
    let mut stored = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stored.len() < count && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let payload = rdkafka::Message::payload(&m).unwrap_or_default();
            let number: usize = String::from_utf8_lossy(&payload[..6.min(payload.len())])
                .parse()
                .unwrap();
            stored.push((rdkafka::Message::offset(&m), number));
        }
    }
    stored
}
