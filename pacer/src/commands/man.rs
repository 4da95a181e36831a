//! Man pages generated from the clap definitions (clap_mangen), so they
//! say exactly what `--help` says: `pacer.1` and one `pacer-SUBCOMMAND.1`
//! per subcommand, each with its examples and exit codes.

use std::path::Path;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The roff text of one page.
fn render(cmd: clap::Command) -> Vec<u8> {
    let mut text = Vec::new();
    // Rendering into memory cannot fail.
    let _ = clap_mangen::Man::new(cmd).render(&mut text);
    text
}

/// The pages of `root` (the `pacer` command tree): with `dir`, write
/// every page there (creating it) and return the list of what was
/// written; without, return `pacer.1` itself.
pub fn write(root: clap::Command, dir: Option<&Path>) -> Result<String, ManError> {
    let Some(dir) = dir else {
        return Ok(String::from_utf8_lossy(&render(root)).into_owned());
    };
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ManError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let mut pages = vec![("pacer.1".to_string(), root.clone())];
    for sub in root.get_subcommands() {
        let name = format!("pacer-{}", sub.get_name());
        pages.push((format!("{name}.1"), sub.clone().name(name)));
    }
    let mut written = String::new();
    for (file, cmd) in pages {
        let path = dir.join(&file);
        vmm::whole_file::write(&path, render(cmd)).map_err(err(&path))?;
        written += &format!("{}\n", path.display());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    #[test]
    fn a_page_per_subcommand_with_its_examples() {
        let dir = std::env::temp_dir().join(format!("pacer-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let list = write(Cli::command(), Some(&dir)).unwrap();
        for sub in Cli::command().get_subcommands() {
            let page = dir.join(format!("pacer-{}.1", sub.get_name()));
            assert!(list.contains(&page.display().to_string()), "{list}");
            let text = std::fs::read_to_string(&page).unwrap();
            assert!(text.starts_with(".ie") || text.contains(".TH"), "{text}");
            assert!(
                text.contains("Exit codes"),
                "{} has no exit codes",
                page.display()
            );
        }
        let root = write(Cli::command(), None).unwrap();
        assert!(root.contains("pacer") && root.contains("Exit codes"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
