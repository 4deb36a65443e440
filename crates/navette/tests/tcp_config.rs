//! Settings of the tcp driver that the kernel would refuse on every
//! connection, or that no packet could carry, are refused when the driver
//! is bound, not warned about (or overflowed) while it runs.

use std::sync::Arc;
use std::time::Duration;

use navette::tcp::{Congestion, MAX_FRAGMENT, MAX_PACKET, TcpConfig, TcpDriver};
use navette::{Error, RailCaps, Result, RuntimeConfig, init_tcp};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

fn bind_alone(config: &TcpConfig) -> Result<Arc<TcpDriver>> {
    let mut ranks = LocalBootstrap::job(1, 0x7c9_00c0, [0x3c; JOB_KEY_LEN]);
    let rank = ranks.pop().expect("a job of one has a rank");
    TcpDriver::bind(Arc::new(rank), config)
}

/// A keepalive outside the kernel's limits is refused at bind: past its
/// longest (refused on every connection), or below a second, its shortest
/// (raised to a second without a word).
#[test]
fn a_keepalive_outside_the_kernels_limits_is_a_configuration_error() {
    let keepalive = |after| TcpConfig {
        keepalive: Some(after),
        ..TcpConfig::default()
    };
    for (edge, past) in [
        (Duration::from_secs(32767), Duration::from_secs(32768)),
        (Duration::from_secs(1), Duration::from_millis(500)),
    ] {
        bind_alone(&keepalive(edge)).expect("a keepalive at the kernel's limit is accepted");
        config_error_naming("keepalive", bind_alone(&keepalive(past)));
        config_error_naming("32767 s", bind_alone(&keepalive(past)));
    }
}

/// A congestion control set in code is checked with the kernel as one set
/// by `NAVETTE_TCP_CONGESTION` is: one it does not have is refused at
/// bind (it was only warned about, on every connection).
#[test]
fn a_congestion_control_the_kernel_lacks_is_a_configuration_error() {
    let unknown = TcpConfig {
        congestion: Congestion::All("nosuchcc".into()),
        ..TcpConfig::default()
    };
    config_error_naming("nosuchcc", bind_alone(&unknown));
    let system = TcpConfig {
        congestion: Congestion::System,
        ..TcpConfig::default()
    };
    bind_alone(&system).expect("the system's congestion control is accepted");
}

/// Asserts that `result` is a configuration error whose text names
/// `field`.
fn config_error_naming<T>(field: &str, result: Result<T>) {
    match result {
        Err(err @ Error::Config(_)) => {
            let text = err.to_string();
            assert!(text.contains(field), "{text}");
        }
        Err(other) => panic!("expected a configuration error naming {field}, got {other}"),
        Ok(_) => panic!("a configuration past the limit of {field} was accepted"),
    }
}

fn with_caps(max_packet: usize, max_fragment: usize) -> TcpConfig {
    let config = TcpConfig::default();
    TcpConfig {
        caps: RailCaps {
            max_packet,
            max_fragment,
            ..config.caps
        },
        ..config
    }
}

#[test]
fn rail_capabilities_past_a_packet_header_are_a_configuration_error() {
    let default = TcpConfig::default().caps;
    bind_alone(&with_caps(MAX_PACKET, MAX_FRAGMENT)).expect("the longest packet and fragment");
    for max_fragment in [MAX_FRAGMENT + 1, usize::MAX] {
        let config = with_caps(default.max_packet, max_fragment);
        config_error_naming("max_fragment", bind_alone(&config));
    }
    if let Some(past) = MAX_PACKET.checked_add(1) {
        let config = with_caps(past, default.max_fragment);
        config_error_naming("max_packet", bind_alone(&config));
    }
    let config = with_caps(usize::MAX, default.max_fragment);
    config_error_naming("max_packet", bind_alone(&config));
    // A tcp peer reads nothing of this process's memory.
    let mut config = TcpConfig::default();
    config.caps.read_min = Some(0);
    config_error_naming("read_min", bind_alone(&config));
}

/// Where the driver starts (`init_tcp`), a fragment whose packet length
/// overflowed (a panic, or a wrapped length in a release build) is refused.
#[test]
fn init_tcp_refuses_a_fragment_too_long_for_a_packet() {
    let mut ranks = LocalBootstrap::job(1, 0x7c9_00c1, [0x3c; JOB_KEY_LEN]);
    let rank = ranks.pop().expect("a job of one has a rank");
    let config = RuntimeConfig {
        tcp: with_caps(TcpConfig::default().caps.max_packet, usize::MAX),
        log_to_stderr: false,
        report_on_sigusr1: false,
        ..RuntimeConfig::default()
    };
    config_error_naming("max_fragment", init_tcp(Arc::new(rank), config));
}
