//! A broker whose disk fills up: a tmpfs of a chosen size as its data directory (mounting
//! needs root, which CI has; elsewhere the tests print SKIP), and the writes that fill it.

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
        let saved = tempfile::tempdir().unwrap();
        run(
            "cp",
            &["-a".as_ref(), dir.join(".").as_os_str(), saved.path().as_os_str()],
        );
        if !mount_tmpfs(dir, mib) {
            return None;
        }
        let tmpfs = Tmpfs {
            path: dir.to_path_buf(),
            _made: None,
        };
        run(
            "cp",
            &["-a".as_ref(), saved.path().join(".").as_os_str(), dir.as_os_str()],
        );
        Some(tmpfs)
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

fn mount_tmpfs(dir: &Path, mib: u32) -> bool {
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(dir)
        .output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            println!(
                "SKIP: cannot mount a tmpfs: {}",
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
