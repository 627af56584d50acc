//! The measurement INSERT: a record's main figures as columns, its
//! histogram in its own column, the rest as JSON.

use crate::Measurement;
use rusqlite::params;

pub(crate) fn measurement_insert_sql() -> &'static str {
    "INSERT INTO measurements (run_id, cell_id, role, src, dst, test, op, direction, stream, size, streams,
        duration_s, bytes, iterations, bw_gbps, msg_rate_mpps, lat_kind, lat_samples, lat_min_us,
        lat_p50_us, lat_p90_us, lat_p99_us, lat_p999_us, lat_max_us, lat_mean_us, cpu_local_pct,
        cpu_remote_pct, retransmits, udp_sent, udp_lost, udp_loss_pct, mtu, lat_hist, record)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
        ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34)"
}

pub(crate) fn insert_measurement(
    st: &mut rusqlite::Statement<'_>,
    run_id: i64,
    cell_id: &str,
    m: &Measurement,
) -> rusqlite::Result<()> {
    let r = &m.record;
    let l = r.lat_us.as_ref();
    let u = r.udp.as_ref();
    let mut record = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    // The histogram is kept once, in its column (the largest part of a
    // latency record); readers put it back into the record they return.
    let hist = match record.as_object_mut().and_then(|o| o.remove("lat_hist")) {
        Some(serde_json::Value::String(h)) => Some(h),
        _ => None,
    };
    st.execute(params![
        run_id,
        cell_id,
        m.role.as_str(),
        m.src,
        m.dst,
        r.test,
        r.op,
        r.direction,
        r.stream,
        r.size as i64,
        r.streams,
        r.duration_s,
        clamp_i64(r.bytes),
        r.iterations.map(clamp_i64),
        r.bw_gbps,
        r.msg_rate_mpps,
        l.map(|l| l.kind.label()),
        l.map(|l| clamp_i64(l.samples)),
        l.map(|l| l.min),
        l.map(|l| l.p50),
        l.map(|l| l.p90),
        l.map(|l| l.p99),
        l.map(|l| l.p999),
        l.map(|l| l.max),
        l.map(|l| l.mean),
        r.cpu_local_pct,
        r.cpu_remote_pct,
        r.retransmits.map(clamp_i64),
        u.map(|u| clamp_i64(u.sent)),
        u.map(|u| clamp_i64(u.lost)),
        u.map(|u| u.loss_pct),
        r.mtu,
        hist,
        record.to_string(),
    ])?;
    Ok(())
}

/// SQLite integers are signed 64-bit; counts above that are stored capped
/// in the columns (the record JSON keeps the exact value).
fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
