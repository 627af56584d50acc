//! fabperf's UDP datagram header and the receiver's accounting (loss,
//! reordering, duplicates, jitter) fed with datagrams a peer chose.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let session = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
    let (received, other) = fabperf_sock::test_support::receive_datagrams(&data[4..], session);
    assert!(received + other <= data.len() as u64);
});
