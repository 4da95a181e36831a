//! COM1: vm-superio's 16550 `Serial`, writing into a [`ConsoleWriter`] that
//! copies guest output to the VM's log file and, optionally, to stdout with a
//! `[vmname] ` prefix on every line (whole lines, so that the consoles of
//! several VMs never interleave within a line).
//!
//! A guest decides how much it prints, so the writer bounds it: past
//! [`ConsoleWriter::with_limit`] bytes it writes one marker line and drops
//! the rest (counting it, and saying how much at the end). A log write that
//! fails (full disk) stops the log and is kept for the VM's result
//! ([`ConsoleWriter::log_error`]) instead of failing the guest's port write.

use crate::bus::{IoContext, PioDevice};
use crate::irq::InterruptLine;
use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use vm_superio::serial::NoEvents;
use vm_superio::{Serial, Trigger};

pub const COM1_BASE: u16 = 0x3f8;
pub const COM1_LEN: u16 = 8;
/// ISA IRQ line of COM1.
pub const COM1_IRQ: u32 = 4;
/// A line longer than this is emitted in pieces.
const MAX_LINE: usize = 4096;
/// How much of the last console line is kept for error messages.
const LAST_LINE_KEPT: usize = 256;

/// vm-superio's interrupt trigger over the UART's [`InterruptLine`]: each
/// trigger is an edge on COM1's ISA line.
pub struct LineTrigger(pub Arc<dyn InterruptLine>);

impl Trigger for LineTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.pulse();
        Ok(())
    }
}

/// Where console output goes.
pub struct ConsoleWriter {
    prefix: String,
    log: Option<File>,
    stdout: bool,
    line: Vec<u8>,
    /// The last non-blank line (at most [`LAST_LINE_KEPT`] bytes), so that a
    /// failing VM's message can quote the guest's own words.
    last_line: String,
    /// Most bytes written to the log (and echoed) before output is dropped.
    limit: u64,
    /// Bytes written so far.
    emitted: u64,
    /// Bytes dropped past `limit`.
    dropped: u64,
    /// The first failed write to the log file; nothing more goes there.
    log_error: Option<String>,
    /// The closing "bytes dropped" line was written.
    drop_reported: bool,
}

impl ConsoleWriter {
    /// `vm` names the VM for the stdout prefix; `log` receives the raw
    /// console stream; `stdout` echoes prefixed lines.
    pub fn new(vm: &str, log: Option<File>, stdout: bool) -> Self {
        Self {
            prefix: format!("[{vm}] "),
            log,
            stdout,
            line: Vec::new(),
            last_line: String::new(),
            limit: u64::MAX,
            emitted: 0,
            dropped: 0,
            log_error: None,
            drop_reported: false,
        }
    }

    /// Keep at most `bytes` of console output (log and echo alike).
    pub fn with_limit(mut self, bytes: u64) -> Self {
        self.limit = bytes;
        self
    }

    /// The first failed write to the log file (one line), if any.
    pub fn log_error(&self) -> Option<&str> {
        self.log_error.as_deref()
    }

    /// Bytes of console output dropped past the limit.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Write `bytes` to the log and the echo (a failed log write is kept in
    /// `log_error` and ends the log; a closed stdout ends the echo).
    fn put(&mut self, bytes: &[u8]) {
        if let (Some(f), None) = (self.log.as_mut(), &self.log_error) {
            if let Err(e) = f.write_all(bytes) {
                self.log_error = Some(e.to_string());
            }
        }
        if self.stdout {
            let mut out = Vec::with_capacity(self.prefix.len() + bytes.len() + 1);
            out.extend_from_slice(self.prefix.as_bytes());
            out.extend_from_slice(bytes);
            if out.last() != Some(&b'\n') {
                out.push(b'\n');
            }
            // One write per line under the stdout lock. If stdout is gone
            // (closed pipe), stop echoing; the log file keeps everything.
            let stdout = io::stdout();
            let mut lock = stdout.lock();
            if let Err(e) = lock.write_all(&out).and_then(|_| lock.flush()) {
                log::warn!("{}console echo to stdout stopped: {e}", self.prefix);
                self.stdout = false;
            }
        }
    }

    /// The last non-blank line the guest printed (trimmed, lossy UTF-8).
    pub fn last_line(&self) -> Option<&str> {
        (!self.last_line.is_empty()).then_some(self.last_line.as_str())
    }

    fn emit_line(&mut self) -> io::Result<()> {
        if self.line.is_empty() {
            return Ok(());
        }
        let kept = &self.line[..self.line.len().min(LAST_LINE_KEPT)];
        let text = String::from_utf8_lossy(kept);
        if !text.trim().is_empty() {
            self.last_line = text.trim().to_string();
        }
        let len = self.line.len() as u64;
        if self.emitted.saturating_add(len) > self.limit {
            if self.dropped == 0 {
                let marker = format!(
                    "[pacer: console output past {} bytes dropped from here]\n",
                    self.limit
                );
                self.put(marker.as_bytes());
            }
            self.dropped += len;
        } else {
            self.emitted += len;
            let line = std::mem::take(&mut self.line);
            self.put(&line);
            self.line = line;
        }
        self.line.clear();
        Ok(())
    }
}

impl Write for ConsoleWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &b in buf {
            if b == b'\r' {
                continue;
            }
            self.line.push(b);
            if b == b'\n' || self.line.len() >= MAX_LINE {
                self.emit_line()?;
            }
        }
        Ok(buf.len())
    }

    /// vm-superio flushes after every byte; whole lines are what we emit,
    /// so a flush does not cut the current line (see [`ConsoleWriter::finish`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ConsoleWriter {
    /// Emit a pending partial line (when the VM stops).
    pub fn finish(&mut self) -> io::Result<()> {
        self.emit_line()?;
        if self.dropped > 0 && !self.drop_reported {
            self.drop_reported = true;
            let marker = format!(
                "[pacer: {} bytes of console output dropped past the limit of {} bytes]\n",
                self.dropped, self.limit
            );
            self.put(marker.as_bytes());
        }
        if let Some(f) = self.log.as_mut() {
            f.flush()?;
        }
        Ok(())
    }
}

impl Drop for ConsoleWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The COM1 device on the bus.
pub struct SerialConsole {
    inner: Serial<LineTrigger, NoEvents, ConsoleWriter>,
}

impl SerialConsole {
    pub fn new(interrupt: Arc<dyn InterruptLine>, out: ConsoleWriter) -> Self {
        Self {
            inner: Serial::new(LineTrigger(interrupt), out),
        }
    }

    /// Flush a partial last line (called when the VM stops).
    pub fn flush(&mut self) {
        let _ = self.inner.writer_mut().finish();
    }

    /// The first failed write to the console log, if any.
    pub fn log_error(&mut self) -> Option<String> {
        self.inner.writer_mut().log_error().map(str::to_string)
    }

    /// Bytes of console output dropped past the writer's limit.
    pub fn dropped(&mut self) -> u64 {
        self.inner.writer_mut().dropped()
    }

    /// The last non-blank line the guest printed.
    pub fn last_line(&mut self) -> Option<String> {
        self.inner.writer_mut().last_line().map(str::to_string)
    }
}

impl PioDevice for SerialConsole {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = self.inner.read(offset as u8);
        }
    }

    fn write(&mut self, _ctx: IoContext, offset: u16, data: &[u8]) {
        if let Some(&b) = data.first() {
            if let Err(e) = self.inner.write(offset as u8, b) {
                log::warn!("serial write failed: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn console_to_log_file() {
        let dir = std::env::temp_dir().join(format!("pacer-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vm.log");
        let f = File::create(&path).unwrap();
        let mut dev = SerialConsole::new(
            Arc::new(crate::irq::NoInterrupt),
            ConsoleWriter::new("vm", Some(f), false),
        );
        let ctx = IoContext { vcpu: 0 };
        for &b in b"hello\r\nworld" {
            dev.write(ctx, 0, &[b]);
        }
        let mut s = String::new();
        File::open(&path).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello\n", "whole lines only");
        assert_eq!(dev.last_line().as_deref(), Some("hello"));
        dev.flush();
        let mut s = String::new();
        File::open(&path).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello\nworld");
        assert_eq!(dev.last_line().as_deref(), Some("world"));
        // LSR reports the transmitter empty.
        let mut lsr = [0u8];
        dev.read(ctx, 5, &mut lsr);
        assert_ne!(lsr[0] & 0x20, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn console_output_past_the_limit_is_dropped_with_markers() {
        let dir = std::env::temp_dir().join(format!("pacer-serial-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vm.log");
        let mut w =
            ConsoleWriter::new("vm", Some(File::create(&path).unwrap()), false).with_limit(20);
        for _ in 0..1000 {
            w.write_all(b"0123456789\n").unwrap();
        }
        w.finish().unwrap();
        assert_eq!(w.dropped(), 999 * 11);
        drop(w);
        let s = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            s,
            "0123456789\n[pacer: console output past 20 bytes dropped from here]\n\
             [pacer: 10989 bytes of console output dropped past the limit of 20 bytes]\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_log_write_is_kept_not_returned() {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let mut w = ConsoleWriter::new("vm", Some(full), false);
        assert!(w.write_all(b"hello\nworld\n").is_ok());
        let e = w.log_error().unwrap().to_string();
        assert!(e.contains("No space left on device"), "{e}");
        assert!(!e.contains("Os {"), "no debug text: {e}");
    }
}
