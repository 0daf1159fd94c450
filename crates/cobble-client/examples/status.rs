//! Prints the daemon's version and the status of every service, then optionally starts one.
//!
//! ```text
//! PEBBLE=/tmp/pebble cargo run -p cobble-client --example status [SERVICE]
//! ```
//!
//! The socket comes from `PEBBLE_SOCKET` or `$PEBBLE/.pebble.socket`, like the CLI.

use cobble_client::{Client, ClientConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(ClientConfig::from_env())?;

    let info = client.system_info().await?;
    println!("daemon version {}", info.version);

    if let Some(service) = std::env::args().nth(1) {
        let change_id = client.start(std::slice::from_ref(&service)).await?;
        let change = client.wait_change(&change_id, None).await?;
        if change.err.is_empty() {
            println!("started {service} (change {change_id})");
        } else {
            println!("could not start {service}:\n{}", change.err);
        }
    }

    for service in client.services(&[]).await? {
        let since = service.current_since.as_deref().unwrap_or("-");
        println!(
            "{:<20} {:<9} {:<9} {since}",
            service.name, service.startup, service.current
        );
    }
    Ok(())
}
