//! The git commit the binary is built from, for `capsim --version` and reports ("unknown" outside a
//! git checkout).
fn main() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    println!("cargo:rustc-env=CAPSIM_GIT_COMMIT={commit}{}", if dirty { "-dirty" } else { "" });
    // Run again when the commit or the sources change, and only then: a path that does not exist
    // reruns the script at every build and so recompiles capsim at every build (`.git/HEAD` in a git
    // worktree, where .git is a file, or in a source archive); `.git/index` is rewritten by `git
    // status` itself, so `cargo test` after `cargo build` recompiled capsim. The files are where git
    // says they are (worktrees keep HEAD apart, and the branch's ref in the common directory).
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    for path in watched.into_iter().flatten().map(|p| root.join(p)) {
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    embed_inferencex();
}

/// The InferenceX part of the shipped corpus (calibration/corpus/inferencex-dsr1), embedded so that the
/// installed binary calibrates and validates from any directory: a generated list of
/// (deployment, metadata.json, [(point file, text)]) in name order, each text an `include_str!`.
fn embed_inferencex() {
    use std::fmt::Write;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/corpus/inferencex-dsr1");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut code = String::from("pub const INFERENCEX: &[(&str, &str, &[(&str, &str)])] = &[\n");
    let sorted = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> =
            std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
        v.sort();
        v
    };
    for dep in sorted(&root).into_iter().filter(|p| p.is_dir()) {
        let meta = dep.join("metadata.json");
        if !meta.is_file() {
            continue;
        }
        println!("cargo:rerun-if-changed={}", dep.display());
        let name = dep.file_name().unwrap().to_string_lossy().to_string();
        write!(code, "    ({name:?}, include_str!({:?}), &[", meta.display().to_string()).unwrap();
        for f in sorted(&dep) {
            let fname = f.file_name().unwrap().to_string_lossy().to_string();
            if f.is_file() && fname.ends_with(".json") && fname != "metadata.json" {
                write!(code, "({fname:?}, include_str!({:?})), ", f.display().to_string()).unwrap();
            }
        }
        code.push_str("]),\n");
    }
    code.push_str("];\n");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("corpus_inferencex.rs");
    std::fs::write(out, code).unwrap();
}
