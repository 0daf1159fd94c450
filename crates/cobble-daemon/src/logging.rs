//! The daemon log: `2024-06-28T02:20:03.346Z [cobble] message` on stderr, like Pebble's.
//! Debug lines appear only with `PEBBLE_DEBUG=1`.
//!
//! Lines go to stderr through [`crate::output::stderr`], so a stalled stderr never blocks the
//! thread that logs.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::state::format_utc_millis;

struct DaemonFormat;

impl<S, N> FormatEvent<S, N> for DaemonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(
            writer,
            "{} [cobble] ",
            format_utc_millis(jiff::Timestamp::now())
        )?;
        if *event.metadata().level() == Level::DEBUG {
            write!(writer, "DEBUG ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// One complete log line for `message`, newline included, for text written outside `tracing`.
pub fn format_line(message: &str) -> String {
    format!(
        "{} [cobble] {message}\n",
        format_utc_millis(jiff::Timestamp::now())
    )
}

/// Hands each formatted event to the stderr sink as one piece.
struct StderrLines;

/// One event's text, queued on the stderr sink when the formatter is done with it.
#[derive(Default)]
struct EventText(Vec<u8>);

impl std::io::Write for EventText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventText {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            crate::output::stderr().text(&self.0);
        }
    }
}

impl<'a> MakeWriter<'a> for StderrLines {
    type Writer = EventText;

    fn make_writer(&'a self) -> EventText {
        EventText::default()
    }
}

/// Installs the daemon logger (once; later calls are no-ops).
pub fn init(debug: bool) {
    let level = if debug { Level::DEBUG } else { Level::INFO };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(StderrLines)
        .event_format(DaemonFormat)
        .try_init();
    // A panic message goes through the same queue: the default hook writes to stderr
    // directly and would block a panicking worker on a stalled stream.
    std::panic::set_hook(Box::new(|info| {
        crate::output::stderr().text(format_line(&format!("panic: {info}")).as_bytes());
    }));
}
