//! The tcp probe: success is a connection that opens.

use cobble_plan::TcpCheck;
use futures_util::future::BoxFuture;

use super::checker::{CheckError, Checker};

/// Opens a TCP connection to `host:port` (host `localhost` unless set) and closes it.
pub(super) struct TcpChecker {
    host: String,
    port: u32,
}

impl TcpChecker {
    pub(super) fn new(config: &TcpCheck) -> TcpChecker {
        let host = if config.host.is_empty() {
            "localhost".to_owned()
        } else {
            config.host.clone()
        };
        TcpChecker {
            host,
            port: config.port,
        }
    }

    /// `host:port`, bracketing IPv6 literals like Go's `net.JoinHostPort`.
    fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    async fn dial(&self) -> Result<(), CheckError> {
        let address = self.address();
        let port = u16::try_from(self.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| CheckError::new(format!("dial tcp: address {address}: invalid port")))?;
        let targets = tokio::net::lookup_host((self.host.as_str(), port))
            .await
            .map_err(|e| {
                CheckError::new(format!(
                    "dial tcp: lookup {}: {}",
                    self.host,
                    cobble_sys::os_error_text(&e)
                ))
            })?;
        // Go dials the addresses in the resolver's order and, when every one fails, reports
        // the first one's error: for `localhost` that is `[::1]` where the machine has an
        // IPv6 loopback, as both resolvers put `::1` first.
        let mut first_error = None;
        for target in targets {
            match tokio::net::TcpStream::connect(target).await {
                Ok(stream) => {
                    drop(stream);
                    return Ok(());
                }
                Err(e) => {
                    first_error.get_or_insert((target, e));
                }
            }
        }
        Err(match first_error {
            Some((target, e)) => CheckError::new(format!(
                "dial tcp {target}: connect: {}",
                cobble_sys::os_error_text(&e)
            )),
            None => CheckError::new(format!("dial tcp: lookup {}: no such host", self.host)),
        })
    }
}

impl Checker for TcpChecker {
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>> {
        Box::pin(self.dial())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_port_succeeds_and_closed_port_fails() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = u32::from(listener.local_addr().unwrap().port());
        let checker = TcpChecker::new(&TcpCheck {
            port,
            host: "127.0.0.1".into(),
        });
        assert_eq!(checker.check().await, Ok(()));
        drop(listener);
        let error = checker.check().await.unwrap_err();
        assert_eq!(
            error.message,
            format!("dial tcp 127.0.0.1:{port}: connect: connection refused")
        );
    }

    #[tokio::test]
    async fn a_name_of_several_addresses_that_all_refuse_names_the_first() {
        // Port 1 of the loopback addresses: nothing listens there.
        let resolved: Vec<_> = tokio::net::lookup_host(("localhost", 1))
            .await
            .unwrap()
            .collect();
        let checker = TcpChecker::new(&TcpCheck {
            port: 1,
            host: String::new(),
        });
        let error = checker.check().await.unwrap_err();
        assert_eq!(
            error.message,
            format!("dial tcp {}: connect: connection refused", resolved[0])
        );
    }

    #[tokio::test]
    async fn host_defaults_to_localhost_and_bad_ports_fail() {
        let checker = TcpChecker::new(&TcpCheck {
            port: 70000,
            host: String::new(),
        });
        assert_eq!(checker.address(), "localhost:70000");
        assert_eq!(
            checker.check().await.unwrap_err().message,
            "dial tcp: address localhost:70000: invalid port"
        );
        let v6 = TcpChecker::new(&TcpCheck {
            port: 1,
            host: "::1".into(),
        });
        assert_eq!(v6.address(), "[::1]:1");
    }
}
