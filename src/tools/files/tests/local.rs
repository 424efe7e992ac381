//! The local files backend against a real folder: confinement to the root (`..`, absolute paths,
//! symlinks out), listing bounds and reading.

use crate::tools::files::backend::FilesBackend;
use crate::tools::files::{FilesError, LocalFiles, RelPath};

fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/note.txt"), "inside").unwrap();
    std::fs::write(root.join(".hidden.txt"), "dotfile").unwrap();
    std::fs::write(dir.path().join("outside.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), root.join("out-link.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("out-dir")).unwrap();
    std::os::unix::fs::symlink(root.join("a/b/note.txt"), root.join("in-link.txt")).unwrap();
    (dir, root)
}

#[tokio::test]
async fn listing_stays_inside_the_root() {
    let (_dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    let mut listed: Vec<String> = files
        .candidates(&[], false)
        .await
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path.display())
        .collect();
    listed.sort();
    assert_eq!(listed, ["/a/b/note.txt", "/in-link.txt"]);
}

#[tokio::test]
async fn reads_follow_links_only_inside_the_root() {
    let (_dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    let (entry, bytes) = files
        .read(&RelPath::parse("in-link.txt").unwrap(), 1024)
        .await
        .unwrap();
    assert_eq!((entry.size, bytes.as_slice()), (6, b"inside".as_slice()));
    assert_eq!(entry.mime_type, "text/plain");
    for refused in ["out-link.txt", "out-dir/outside.txt"] {
        let result = files.read(&RelPath::parse(refused).unwrap(), 1024).await;
        assert!(
            matches!(result, Err(FilesError::BadFileId)),
            "{refused}: {result:?}"
        );
    }
    assert!(matches!(
        files
            .read(&RelPath::parse("missing.txt").unwrap(), 1024)
            .await,
        Err(FilesError::NotFound)
    ));
    assert!(matches!(
        files.read(&RelPath::parse("a").unwrap(), 1024).await,
        Err(FilesError::NotFound)
    ));
    assert!(matches!(
        files
            .read(&RelPath::parse("a/b/note.txt").unwrap(), 3)
            .await,
        Err(FilesError::TooLarge { limit: 3 })
    ));
}

#[test]
fn a_missing_root_is_created_and_a_file_root_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("new/files");
    LocalFiles::open(&root).unwrap();
    assert!(root.is_dir());
    std::fs::write(dir.path().join("plain"), "x").unwrap();
    assert!(matches!(
        LocalFiles::open(&dir.path().join("plain")),
        Err(FilesError::Config(_))
    ));
}

/// A search whose files do not all fit in one tool output keeps the best ones and says it was cut
/// (TOOLS.md: "truncate … with a `truncated: true` flag"), as the other search tools do.
#[tokio::test]
async fn a_search_cut_to_fit_says_it_was_truncated() {
    use crate::tools::Tool;
    use crate::tools::files::SearchNextcloudFiles;
    use crate::tools::text::MAX_RESULT_BYTES;

    let dir = tempfile::tempdir().unwrap();
    // Long folder and file names make each listed file close to a kilobyte (its id encodes the path).
    let deep = dir.path().join("protocols-".repeat(20)).join("sepsis-".repeat(28));
    std::fs::create_dir_all(&deep).unwrap();
    for i in 0..50 {
        std::fs::write(deep.join(format!("sepsis-protocol-{i:02}-{}.txt", "v".repeat(150))), "text").unwrap();
    }
    let backend = std::sync::Arc::new(LocalFiles::open(dir.path()).unwrap());
    let tool = SearchNextcloudFiles::new(backend, 1 << 20);
    let args = serde_json::json!({"query": "sepsis protocol", "max_results": 50});
    let output = tool.call(args, crate::tools::test_support::ctx()).await.unwrap();
    let files = output.result["files"].as_array().unwrap();
    assert!(!files.is_empty() && files.len() < 50, "{} files", files.len());
    assert!(output.result.to_string().len() <= MAX_RESULT_BYTES);
    assert_eq!(output.result["truncated"], true, "{}", output.result["total_count"]);
    assert_eq!(output.result["total_count"], 50);
}

/// A FIFO under the root (a file id can name one) is not a file: opening it for reading would wait
/// for a writer for good and hold a blocking thread that no tool timeout frees.
#[tokio::test]
async fn a_fifo_under_the_root_is_not_found_at_once() {
    let (_dir, root) = tree();
    let fifo = root.join("a/pipe.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let files = LocalFiles::open(&root).unwrap();
    let pipe = RelPath::parse("a/pipe.txt").unwrap();
    let read = files.read(&pipe, 1024);
    let result = tokio::time::timeout(std::time::Duration::from_secs(5), read).await;
    if result.is_err() {
        // Free the stuck thread so the runtime can shut down, then fail.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
        panic!("reading a FIFO blocked");
    }
    assert!(matches!(result, Ok(Err(FilesError::NotFound))), "{result:?}");
    let listed = files.candidates(&[], false).await.unwrap().files;
    assert!(!listed.iter().any(|f| f.path.name() == "pipe.txt"));
}

/// A listing cut at the walk's 5000 files leaves files out: the answer says so (`truncated`), and
/// one that is not cut does not.
#[tokio::test]
async fn a_search_over_a_walk_cut_at_its_bound_says_it_was_truncated() {
    use crate::tools::Tool;
    use crate::tools::files::SearchNextcloudFiles;
    use crate::tools::files::backend::MAX_WALK_ENTRIES;

    let dir = tempfile::tempdir().unwrap();
    for i in 0..=MAX_WALK_ENTRIES {
        std::fs::write(dir.path().join(format!("scan-{i:04}.txt")), "").unwrap();
    }
    let tool = SearchNextcloudFiles::new(std::sync::Arc::new(LocalFiles::open(dir.path()).unwrap()), 1 << 20);
    let args = serde_json::json!({"query": "scan", "max_results": 5});
    let output = tool.call(args, crate::tools::test_support::ctx()).await.unwrap();
    assert_eq!(output.result["files"].as_array().unwrap().len(), 5);
    assert_eq!(output.result["truncated"], true, "{}", output.result["total_count"]);

    std::fs::remove_file(dir.path().join("scan-0000.txt")).unwrap();
    let args = serde_json::json!({"query": "scan", "max_results": 5});
    let output = tool.call(args, crate::tools::test_support::ctx()).await.unwrap();
    assert_eq!(output.result["total_count"], MAX_WALK_ENTRIES);
    assert!(output.result.get("truncated").is_none(), "{}", output.result);
}

/// A content search reads at most 40 files: when more could have matched by their text, the answer
/// says it was cut.
#[tokio::test]
async fn a_content_search_that_could_not_read_every_file_says_it_was_truncated() {
    use crate::tools::Tool;
    use crate::tools::files::SearchNextcloudFiles;
    use crate::tools::files::search::CONTENT_SEARCH_MAX_FILES;

    let dir = tempfile::tempdir().unwrap();
    for i in 0..CONTENT_SEARCH_MAX_FILES {
        std::fs::write(dir.path().join(format!("note-{i:02}.txt")), "nothing here").unwrap();
    }
    let tool = SearchNextcloudFiles::new(std::sync::Arc::new(LocalFiles::open(dir.path()).unwrap()), 1 << 20);
    let args = serde_json::json!({"query": "glargine", "include_content": true});
    let output = tool.call(args.clone(), crate::tools::test_support::ctx()).await.unwrap();
    assert!(output.result.get("truncated").is_none(), "{}", output.result);

    std::fs::write(dir.path().join("note-99.txt"), "insulin glargine").unwrap();
    let output = tool.call(args, crate::tools::test_support::ctx()).await.unwrap();
    assert_eq!(output.result["truncated"], true, "{}", output.result);
}

/// A content search does not read a file over its size limit: when that file's text could have
/// matched, the answer says it is incomplete.
#[tokio::test]
async fn a_content_search_that_skipped_a_file_too_large_to_read_says_it_was_truncated() {
    use crate::tools::Tool;
    use crate::tools::files::SearchNextcloudFiles;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.txt"), "nothing here").unwrap();
    let tool = SearchNextcloudFiles::new(std::sync::Arc::new(LocalFiles::open(dir.path()).unwrap()), 1024);
    let args = serde_json::json!({"query": "glargine", "include_content": true});
    let output = tool.call(args.clone(), crate::tools::test_support::ctx()).await.unwrap();
    assert!(output.result.get("truncated").is_none(), "{}", output.result);

    std::fs::write(dir.path().join("handbook.txt"), format!("insulin glargine {}", "x".repeat(2048))).unwrap();
    let output = tool.call(args, crate::tools::test_support::ctx()).await.unwrap();
    assert_eq!(output.result["truncated"], true, "{}", output.result);
}

/// A root that vanished (an unmounted or renamed share) is the store being unavailable, not an
/// empty store: a search fails instead of answering "nothing found" as if complete.
#[tokio::test]
async fn a_vanished_root_fails_the_search() {
    let (dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    std::fs::rename(&root, dir.path().join("moved")).unwrap();
    let listed = files.candidates(&[], false).await;
    assert!(matches!(listed, Err(FilesError::Io(_))), "{listed:?}");
}

/// A folder the walk cannot read leaves its files out: the listing says so. (Root reads every
/// folder, so this can only be seen as another user.)
#[tokio::test]
async fn an_unreadable_folder_marks_the_listing_truncated() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    // This process's own /proc entry belongs to its user.
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        eprintln!("skipped: root reads every folder");
        return;
    }
    let (_dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    assert!(!files.candidates(&[], false).await.unwrap().truncated);
    std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let listed = files.candidates(&[], false).await;
    std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(listed.unwrap().truncated);
}

/// The local walk lists at most 300 folders (the root among them), as the WebDAV walk does: the
/// same tree gives the same answer on either backend, and a huge tree is not walked for good.
#[tokio::test]
async fn the_local_walk_is_bounded_in_folders() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..400 {
        let folder = dir.path().join(format!("folder-{i:03}"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("note.txt"), "").unwrap();
    }
    let files = LocalFiles::open(dir.path()).unwrap();
    let listed = files.candidates(&[], false).await.unwrap();
    assert_eq!(listed.files.len(), 299);
    assert!(listed.truncated);
}

/// An id naming a path through a file (`a/b/note.txt/x`: ENOTDIR) or through a link loop (ELOOP)
/// is a file that does not exist, as a WebDAV server says too: not the store being unavailable.
#[tokio::test]
async fn a_path_through_a_file_or_a_link_loop_is_not_found() {
    let (_dir, root) = tree();
    std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
    let files = LocalFiles::open(&root).unwrap();
    for id in ["a/b/note.txt/x", "loop/x.txt"] {
        let read = files.read(&RelPath::parse(id).unwrap(), 1024).await;
        assert!(matches!(read, Err(FilesError::NotFound)), "{id}: {read:?}");
    }
}

/// Between the check of a path and its open, whoever can write under the root can swap a checked
/// folder for a link out of it, or the file itself for one: the file opened is checked again.
#[test]
fn a_path_swapped_for_a_link_out_after_its_check_is_refused() {
    let (dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    let checked = root.canonicalize().unwrap().join("a/b/note.txt");
    // The same layout outside the root, then `a` swapped for a link to it.
    std::fs::create_dir_all(dir.path().join("elsewhere/b")).unwrap();
    std::fs::write(dir.path().join("elsewhere/b/note.txt"), "outside").unwrap();
    assert!(files.open_inside(&checked).is_ok(), "before the swap");
    std::fs::rename(root.join("a"), dir.path().join("a-moved")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), root.join("a")).unwrap();
    let opened = files.open_inside(&checked);
    assert!(matches!(opened, Err(FilesError::BadFileId)), "{opened:?}");
    // The file itself swapped for a link (out of the root, as the folder was): not followed.
    std::fs::remove_file(root.join("a")).unwrap();
    std::fs::rename(dir.path().join("a-moved"), root.join("a")).unwrap();
    std::fs::remove_file(root.join("a/b/note.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), root.join("a/b/note.txt")).unwrap();
    let opened = files.open_inside(&checked);
    assert!(matches!(opened, Err(FilesError::NotFound)), "{opened:?}");
    // A checked folder swapped for a file names nothing (ENOTDIR): not the store being down.
    std::fs::remove_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b"), "a file now").unwrap();
    let opened = files.open_inside(&checked);
    assert!(matches!(opened, Err(FilesError::NotFound)), "{opened:?}");
}

/// A FIFO swapped in for a checked file is not opened (it would wait for a writer): the path is
/// first opened as a bare reference and its type checked.
#[test]
fn a_fifo_swapped_in_after_the_check_is_never_opened_for_reading() {
    let (_dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    let checked = root.canonicalize().unwrap().join("a/b/note.txt");
    std::fs::remove_file(&checked).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&checked).status().unwrap().success());
    let opened = files.open_inside(&checked);
    assert!(matches!(opened, Err(FilesError::NotFound)), "{opened:?}");
}

/// The walk keeps to its share of the call's time and answers what it found by then, marked
/// truncated, instead of being cut off with the call: here the call has no time left at all.
#[tokio::test]
async fn a_walk_out_of_time_answers_what_it_found_in_time() {
    let (_dir, root) = tree();
    let files = LocalFiles::open(&root).unwrap();
    let now = tokio::time::Instant::now();
    let listed = crate::tools::http::within_deadline(now, files.candidates(&[], false)).await.unwrap();
    assert!(listed.truncated);
    assert!(listed.files.is_empty(), "{:?}", listed.files);
    let later = now + std::time::Duration::from_secs(30);
    let listed = crate::tools::http::within_deadline(later, files.candidates(&[], false)).await.unwrap();
    assert_eq!((listed.files.len(), listed.truncated), (2, false));
}
