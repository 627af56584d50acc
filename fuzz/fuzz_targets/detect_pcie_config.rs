//! A PCI configuration space as sysfs gives it (`/sys/bus/pci/devices/<addr>/config`, untrusted
//! in a snapshot): the capability walks and the decoded registers.
#![no_main]

use fabperf_detect::pcie;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let c = pcie::parse(data);
    if let Some(t) = c.port_type {
        let _ = pcie::port_type_name(t);
    }
    if let Some(ctrl) = c.acs_ctrl {
        let _ = pcie::acs_ctrl_text(ctrl);
        let _ = pcie::acs_redirects(ctrl);
    }
    if let Some(s) = c.link_speed {
        let _ = pcie::speed_code_gts(s);
    }
});
