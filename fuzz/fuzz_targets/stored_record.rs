//! A stored record's JSON text as `fabperf report` reads it (in place, without a
//! `Value` tree): any bytes never panic, and text that reads as JSON reads the
//! same in place as through a `Value`.
#![no_main]

use fabperf_report::data::RecordRead;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let read = serde_json::from_str::<RecordRead>(s);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(s) {
        let read = read.expect("text that reads as JSON reads as a record");
        assert_eq!(RecordRead::deserialize(&v).expect("a Value reads"), read);
    }
});
