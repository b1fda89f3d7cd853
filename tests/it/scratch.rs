//! Scratch space for tests that write files: a directory of its own under the system's temporary
//! folder, removed with everything in it when the guard is dropped at the end of a passing test, so
//! that runs of the suite leave nothing behind. A failing test keeps it (its panic unwinds through
//! the drop) and says where, so the files its message names can still be read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory `capsim-{tag}-{pid}-{n}` under [`std::env::temp_dir`], removed on drop. Bind
/// it to a named variable (`let dir = Scratch::new("tag");`, never `_`) for as long as its files
/// are used.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("capsim-{tag}-{}-{n}", std::process::id()));
        // A leftover of an earlier process that had the same id (killed before it could clean up).
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scratch files of the failed test kept in {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[test]
fn a_scratch_folder_is_unique_and_gone_once_dropped() {
    let (a, b) = (Scratch::new("scratch"), Scratch::new("scratch"));
    assert_ne!(a.path(), b.path());
    std::fs::create_dir_all(a.join("sub")).unwrap();
    std::fs::write(a.join("sub/f.txt"), "x").unwrap();
    let kept = a.path().to_path_buf();
    drop(a);
    assert!(!kept.exists() && b.path().is_dir());
}

#[test]
fn a_failing_test_keeps_its_scratch_folder() {
    let kept = std::panic::catch_unwind(|| {
        let dir = Scratch::new("scratch-kept");
        std::fs::write(dir.join("f.txt"), "x").unwrap();
        std::panic::panic_any(dir.path().to_path_buf());
    })
    .unwrap_err()
    .downcast::<PathBuf>()
    .unwrap();
    assert!(kept.join("f.txt").is_file());
    std::fs::remove_dir_all(*kept).unwrap();
}
