//! Which project a working directory belongs to: the name of the git repository containing
//! it (a worktree maps to its main repository), else the directory's own name.

use std::path::{Path, PathBuf};

/// The project name for `cwd`. Reads the file system (looks for `.git` upwards) but never
/// runs git.
pub fn detect(cwd: &Path) -> String {
    place(cwd).name
}

/// Where a working directory is: its project's name, and the working tree it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The project name: the main repository's directory name (a worktree maps to its
    /// main repository), else the directory's own name.
    pub name: String,
    /// The working tree holding `cwd`: the directory with the `.git` above it (a
    /// worktree's own, not its main repository's), else `cwd` itself.
    pub tree: PathBuf,
}

/// The project and working tree of `cwd`.
pub fn place(cwd: &Path) -> Place {
    match find(cwd) {
        Some((tree, main)) => Place {
            name: dir_name(&main),
            tree,
        },
        None => Place {
            name: dir_name(cwd),
            tree: cwd.to_path_buf(),
        },
    }
}

/// Most bytes read from a `.git` file (`gitdir: <path>`; a path is at most 4 KiB).
pub const MAX_DOT_GIT_FILE: u64 = 8 * 1024;

/// The main repository's working directory for `cwd`, if it is inside one.
pub fn repo_root(cwd: &Path) -> Option<PathBuf> {
    find(cwd).map(|(_, main)| main)
}

/// The working tree holding `cwd` and its main repository's working directory (the same
/// but for a worktree), if `cwd` is inside one.
///
/// Only a `.git` directory or a small regular `.git` file counts; anything else (a FIFO, a
/// device, a symlink to `/dev/zero`) is passed over without being opened for reading
/// beyond a non-blocking open and a bounded read, so a hostile tree can neither block the
/// hook nor make it read without end.
fn find(cwd: &Path) -> Option<(PathBuf, PathBuf)> {
    for dir in cwd.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(meta) = std::fs::metadata(&dot_git) else {
            continue;
        };
        let tree = dir.to_path_buf();
        if meta.is_dir() {
            return Some((tree.clone(), tree));
        }
        if !meta.is_file() || meta.len() > MAX_DOT_GIT_FILE {
            continue;
        }
        // A worktree or submodule: `.git` is a file `gitdir: <path>`.
        if let Some(text) = read_small(&dot_git)
            && let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir:"))
        {
            let gitdir = dir.join(gitdir.trim());
            let main = main_worktree_of(&gitdir).unwrap_or_else(|| tree.clone());
            return Some((tree, main));
        }
        return Some((tree.clone(), tree));
    }
    None
}

/// A regular file's text, at most [`MAX_DOT_GIT_FILE`] bytes. Opened non-blocking (the
/// path may have become a FIFO since it was looked at), and checked again once open.
fn read_small(path: &Path) -> Option<String> {
    use rustix::fs::OFlags;
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    file.take(MAX_DOT_GIT_FILE).read_to_end(&mut buf).ok()?;
    String::from_utf8(buf).ok()
}

/// `<main>/.git/worktrees/<name>` → `<main>`.
fn main_worktree_of(gitdir: &Path) -> Option<PathBuf> {
    let parent = gitdir.parent()?;
    if parent.file_name()? != "worktrees" {
        return None;
    }
    let dot_git = parent.parent()?;
    if dot_git.file_name()? != ".git" {
        return None;
    }
    dot_git.parent().map(Path::to_path_buf)
}

fn dir_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| p.to_string_lossy().into_owned())
}

/// True when `name` matches a glob with `*` (any run) and `?` (one character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_repo_worktree_and_plain_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("acme-api");
        std::fs::create_dir_all(repo.join(".git/worktrees/feature")).expect("mkdir");
        std::fs::create_dir_all(repo.join("src/deep")).expect("mkdir");
        assert_eq!(detect(&repo.join("src/deep")), "acme-api");
        assert_eq!(detect(&repo), "acme-api");

        let wt = tmp.path().join("acme-feature");
        std::fs::create_dir_all(wt.join("lib")).expect("mkdir");
        std::fs::write(
            wt.join(".git"),
            format!(
                "gitdir: {}\n",
                repo.join(".git/worktrees/feature").display()
            ),
        )
        .expect("write");
        assert_eq!(detect(&wt.join("lib")), "acme-api");

        let plain = tmp.path().join("scratch");
        std::fs::create_dir_all(&plain).expect("mkdir");
        // tmp itself is not in a repo on CI; the name of the dir is the project.
        if repo_root(&plain).is_none() {
            assert_eq!(detect(&plain), "scratch");
        }
        assert_eq!(
            detect(Path::new("/home/dev/does-not-exist-acme")),
            "does-not-exist-acme"
        );
    }

    #[test]
    fn fifos_devices_and_huge_files_named_dot_git_are_passed_over() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("outer");
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        let fifo = repo.join("fifo/inner");
        std::fs::create_dir_all(&fifo).expect("mkdir");
        let status = std::process::Command::new("mkfifo")
            .arg(repo.join("fifo/.git"))
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let zero = repo.join("zero/inner");
        std::fs::create_dir_all(&zero).expect("mkdir");
        std::os::unix::fs::symlink("/dev/zero", repo.join("zero/.git")).expect("symlink");
        let big = repo.join("big/inner");
        std::fs::create_dir_all(&big).expect("mkdir");
        std::fs::write(repo.join("big/.git"), vec![b'x'; 1 << 20]).expect("write");
        // Each finishes at once and finds the real repository above.
        for cwd in [&fifo, &zero, &big] {
            assert_eq!(detect(cwd), "outer", "{}", cwd.display());
        }
    }

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("acme-*", "acme-api", true),
            ("acme-*", "acme", false),
            ("*", "", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*secret*", "my-secret-proj", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} vs {n}");
        }
    }
}
