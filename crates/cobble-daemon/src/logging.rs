//! The daemon log: `2024-06-28T02:20:03.346Z [cobble] message` on stderr, like Pebble's.
//! Debug lines appear only with `PEBBLE_DEBUG=1`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
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

/// Installs the daemon logger (once; later calls are no-ops).
pub fn init(debug: bool) {
    let level = if debug { Level::DEBUG } else { Level::INFO };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .event_format(DaemonFormat)
        .try_init();
}
