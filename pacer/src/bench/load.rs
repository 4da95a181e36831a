//! A matrix file read and checked whole: its own fields (`matrix.rs`),
//! then every VM it would start, as a host config's VM (`vm_check.rs`).

use super::matrix::{Matrix, MatrixError};
use super::vm_check;
use std::path::Path;
use vmm::config::HostInfo;

impl Matrix {
    /// Read and validate a matrix file against the running host.
    pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
        let host = HostInfo::detect()?;
        let bytes = vmm::input::read_regular_file(path, vmm::input::MAX_CONFIG_BYTES, "a matrix")
            .map_err(|source| MatrixError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        // Not UTF-8: the bad byte's line, column and field, as a config's.
        let text = String::from_utf8(bytes).map_err(|e| MatrixError::Invalid {
            path: path.to_path_buf(),
            diagnostics: vec![vmm::config::errors::utf8_error(
                e.as_bytes(),
                &e.utf8_error(),
            )],
        })?;
        Self::parse(&text, path, &host)
    }

    /// Validate `text` as if read from `path` (relative paths inside are
    /// resolved against `path`'s directory).
    pub fn parse(text: &str, path: &Path, host: &HostInfo) -> Result<Matrix, MatrixError> {
        let m = Self::parse_fields(text, path, host)?;
        let mut diags = vm_check::check(&m, text, host);
        if !diags.is_empty() {
            diags.sort_by_key(|d| (d.line, d.column));
            return Err(MatrixError::Invalid {
                path: path.to_path_buf(),
                diagnostics: diags,
            });
        }
        Ok(m)
    }
}
