//! Settings of the tcp driver that the kernel would refuse on every
//! connection are refused when the driver is bound, not warned about
//! while it runs.

use std::sync::Arc;
use std::time::Duration;

use navette::tcp::{TcpConfig, TcpDriver};
use navette::{Error, Result};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

fn bind_alone(config: &TcpConfig) -> Result<Arc<TcpDriver>> {
    let mut ranks = LocalBootstrap::job(1, 0x7c9_00c0, [0x3c; JOB_KEY_LEN]);
    let rank = ranks.pop().expect("a job of one has a rank");
    TcpDriver::bind(Arc::new(rank), config)
}

#[test]
fn a_keepalive_past_the_kernel_limit_is_a_configuration_error() {
    let longest = TcpConfig {
        keepalive: Some(Duration::from_secs(32767)),
        ..TcpConfig::default()
    };
    bind_alone(&longest).expect("Linux's longest keepalive is accepted");
    let too_long = TcpConfig {
        keepalive: Some(Duration::from_secs(32768)),
        ..TcpConfig::default()
    };
    match bind_alone(&too_long) {
        Err(err @ Error::Config(_)) => {
            let text = err.to_string();
            assert!(
                text.contains("keepalive") && text.contains("32767"),
                "{text}"
            );
        }
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("a keepalive of 32768 s was accepted"),
    }
}
