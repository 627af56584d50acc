//! The endpoint's two buffers, registered: host memory, or GPU memory by
//! dma-buf or peermem, each failure explained.

use crate::error::{register_error, RdmaError};
use crate::gpu::GpuReg;
use crate::sys::{self, DeviceReg, RegBuf};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::sync::Arc;

/// Access of the source buffer (local writes, peers' RDMA reads) and of the destination
/// buffer (peers' RDMA writes too).
fn src_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteRead
}

fn dst_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// Two registered host buffers of `len` bytes, the source filled.
pub(super) fn host_buffers(
    pd: &Arc<ProtectionDomain>,
    len: usize,
) -> Result<(RegBuf, RegBuf), RdmaError> {
    let mut src = RegBuf::new(len).map_err(RdmaError::Setup)?;
    let mut dst = RegBuf::new(len).map_err(RdmaError::Setup)?;
    src.fill(0x5a).map_err(RdmaError::Setup)?;
    let memlock = sys::memlock_limit();
    src.register(pd, src_access()).map_err(|e| {
        RdmaError::Register(register_error(
            e.bytes,
            "source buffer",
            &e.source,
            memlock,
            0,
        ))
    })?;
    dst.register(pd, dst_access()).map_err(|e| {
        RdmaError::Register(register_error(
            e.bytes,
            "destination buffer",
            &e.source,
            memlock,
            src.len(),
        ))
    })?;
    Ok((src, dst))
}

/// Why one way of registering GPU memory failed, in words.
fn gpu_reg_error(how: DeviceReg, dev: &str, e: &sys::RegError) -> String {
    let errno = e.source.raw_os_error();
    match how {
        DeviceReg::DmaBuf if errno == Some(libc::EOPNOTSUPP) => format!(
            "ibv_reg_dmabuf_mr on {dev}: {}: the loaded libibverbs has no ibv_reg_dmabuf_mr \
             (rdma-core 34 or later has it) or {dev}'s provider cannot import dma-bufs (mlx5 \
             can; rxe cannot)",
            e.source
        ),
        DeviceReg::DmaBuf => format!(
            "registering {} bytes of GPU memory as a dma-buf on {dev}: {}",
            e.bytes, e.source
        ),
        DeviceReg::Peermem => format!(
            "ibv_reg_mr of {} bytes of GPU memory on {dev}: {}: without the nvidia_peermem \
             module the RDMA core cannot resolve a GPU address (`modprobe nvidia_peermem`; \
             /sys/module/nvidia_peermem is {})",
            e.bytes,
            e.source,
            if crate::gpu::peermem_loaded() {
                "present"
            } else {
                "absent"
            }
        ),
    }
}

/// Register both GPU buffers one way; on failure neither stays registered (or the one that
/// cannot be deregistered is leaked, never freed).
fn register_gpu_as(
    src: &mut RegBuf,
    dst: &mut RegBuf,
    pd: &Arc<ProtectionDomain>,
    how: DeviceReg,
    dev: &str,
) -> Result<(), String> {
    src.register_device(pd, src_access(), how, dev)
        .map_err(|e| gpu_reg_error(how, dev, &e))?;
    if let Err(e) = dst.register_device(pd, dst_access(), how, dev) {
        let msg = gpu_reg_error(how, dev, &e);
        return Err(match src.deregister() {
            Ok(()) => msg,
            Err(d) => format!("{msg}; {d}"),
        });
    }
    Ok(())
}

/// Register GPU buffers as `reg` asks: dma-buf, peermem, or dma-buf falling back to peermem
/// (`auto`, with the reason as a note).
pub(super) fn register_gpu(
    src: &mut RegBuf,
    dst: &mut RegBuf,
    pd: &Arc<ProtectionDomain>,
    gpu: &sys::cuda::Gpu,
    reg: GpuReg,
    dev: &str,
) -> Result<(DeviceReg, Option<String>), RdmaError> {
    let err = |m: String| RdmaError::Register(m);
    match reg {
        GpuReg::Dmabuf => {
            if let Some(why) = gpu.dmabuf_missing() {
                return Err(err(format!("--gpu-reg dmabuf: {why}")));
            }
            register_gpu_as(src, dst, pd, DeviceReg::DmaBuf, dev).map_err(err)?;
            Ok((DeviceReg::DmaBuf, None))
        }
        GpuReg::Peermem => {
            register_gpu_as(src, dst, pd, DeviceReg::Peermem, dev).map_err(err)?;
            Ok((DeviceReg::Peermem, None))
        }
        GpuReg::Auto => {
            let why = match gpu.dmabuf_missing() {
                None => match register_gpu_as(src, dst, pd, DeviceReg::DmaBuf, dev) {
                    Ok(()) => return Ok((DeviceReg::DmaBuf, None)),
                    Err(e) => e,
                },
                Some(w) => w,
            };
            if !crate::gpu::peermem_loaded() {
                return Err(err(format!(
                    "no way to register GPU memory with {dev}: dma-buf: {why}; peermem: the \
                     nvidia_peermem module is not loaded (`modprobe nvidia_peermem`); \
                     `fabperf doctor` lists what GPUDirect RDMA needs"
                )));
            }
            register_gpu_as(src, dst, pd, DeviceReg::Peermem, dev)
                .map_err(|e| err(format!("dma-buf: {why}; peermem: {e}")))?;
            Ok((
                DeviceReg::Peermem,
                Some(format!(
                    "dma-buf unavailable ({why}); registered through nvidia_peermem"
                )),
            ))
        }
    }
}
