//! What a test's `tracing` subscriber wrote, for the test to read.
//!
//! ```
//! use lock_tests::logs::Logged;
//!
//! let logged = Logged::default();
//! let subscriber = logged.subscriber().finish();
//! let _in_scope = tracing::subscriber::set_default(subscriber);
//! tracing::warn!("look here");
//! assert!(logged.text().contains("look here"));
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::{DefaultFields, Format};
use tracing_subscriber::fmt::{MakeWriter, SubscriberBuilder};

/// Everything written to it, shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    /// A `fmt` subscriber that writes here, as `tracing_subscriber::fmt()`
    /// in an app would but without colours, so that tests match plain
    /// text. Add settings, then `.init()` it for the whole test binary or
    /// `.finish()` it for `tracing::subscriber::set_default`.
    pub fn subscriber(&self) -> SubscriberBuilder<DefaultFields, Format, LevelFilter, Logged> {
        tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    // A test that panicked while writing leaves the log readable.
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for Logged {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Logged {
    type Writer = Logged;

    fn make_writer(&'a self) -> Logged {
        self.clone()
    }
}
