//! The CUDA driver API (`libcuda.so.1`), loaded at run time with `dlopen` (the `libloading`
//! crate) so that fabperf runs where there is no NVIDIA driver and says exactly what is
//! missing when GPU memory is asked for.
//!
//! Only what GPU-memory verbs tests need: initialise, list the GPUs by PCI bus ID, retain a
//! GPU's primary context, allocate and free device memory, set it (`cuMemsetD8`), copy a few
//! bytes to and from it, mark it for synchronous memory operations (what NVIDIA's GPUDirect RDMA
//! guide asks of memory a peer device accesses), and export it as a dma-buf
//! (`cuMemGetHandleForAddressRange`, CUDA 11.7+, optional). Symbols are looked up by the names
//! the CUDA headers map the API to (`cuMemAlloc` is `cuMemAlloc_v2` since CUDA 3.2, and so on)
//! and called with the prototypes of `cuda.h`; a library without one of the required symbols
//! is refused by name, never half used.
//!
//! `FABPERF_CUDA_LIBRARY` names another file to load instead of `libcuda.so.1` (a driver
//! installed outside the loader's path).

use libloading::Library;
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
/// `CUdeviceptr`: `unsigned long long` on 64-bit Linux.
pub(crate) type DevPtr = c_ulonglong;

const CUDA_SUCCESS: CuResult = 0;
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
const ATTR_DMA_BUF_SUPPORTED: c_int = 124;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
const HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
/// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`.
const POINTER_ATTR_SYNC_MEMOPS: c_int = 6;

/// The library loaded by default.
pub(crate) const LIBCUDA: &str = "libcuda.so.1";

type FnInit = unsafe extern "C" fn(c_uint) -> CuResult;
type FnIntOut = unsafe extern "C" fn(*mut c_int) -> CuResult;
type FnDeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
type FnDeviceStr = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
type FnDeviceAttr = unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult;
type FnCtxRetain = unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult;
type FnCtxRelease = unsafe extern "C" fn(CuDevice) -> CuResult;
type FnCtxSet = unsafe extern "C" fn(CuContext) -> CuResult;
type FnVoid = unsafe extern "C" fn() -> CuResult;
type FnMemAlloc = unsafe extern "C" fn(*mut DevPtr, usize) -> CuResult;
type FnMemFree = unsafe extern "C" fn(DevPtr) -> CuResult;
type FnMemset = unsafe extern "C" fn(DevPtr, c_uchar, usize) -> CuResult;
type FnHtoD = unsafe extern "C" fn(DevPtr, *const c_void, usize) -> CuResult;
type FnDtoH = unsafe extern "C" fn(*mut c_void, DevPtr, usize) -> CuResult;
type FnPtrAttr = unsafe extern "C" fn(*const c_void, c_int, DevPtr) -> CuResult;
type FnErrText = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
type FnGetHandle = unsafe extern "C" fn(*mut c_void, DevPtr, usize, c_int, c_ulonglong) -> CuResult;

/// The driver entry points. Function pointers stay valid while `_lib` is loaded, which is for
/// the life of the process (the value lives in a `static`).
struct Api {
    _lib: Library,
    path: String,
    init: FnInit,
    driver_get_version: FnIntOut,
    device_get_count: FnIntOut,
    device_get: FnDeviceGet,
    device_get_pci_bus_id: FnDeviceStr,
    device_get_name: FnDeviceStr,
    device_get_attribute: FnDeviceAttr,
    primary_ctx_retain: FnCtxRetain,
    primary_ctx_release: FnCtxRelease,
    ctx_set_current: FnCtxSet,
    ctx_synchronize: FnVoid,
    mem_alloc: FnMemAlloc,
    mem_free: FnMemFree,
    memset_d8: FnMemset,
    memcpy_htod: FnHtoD,
    memcpy_dtoh: FnDtoH,
    pointer_set_attribute: FnPtrAttr,
    get_error_name: FnErrText,
    get_error_string: FnErrText,
    /// CUDA 11.7 and later.
    get_handle_for_address_range: Option<FnGetHandle>,
}

/// Look one symbol up; the first name found wins.
fn sym<T: Copy>(lib: &Library, path: &str, names: &[&str]) -> Result<T, String> {
    for n in names {
        let mut z = n.as_bytes().to_vec();
        z.push(0);
        // SAFETY: `T` is the function-pointer type of the symbol's C prototype in cuda.h
        // (each caller names it); the pointer is copied out and used only while the library
        // stays loaded (for the life of the process, see `Api`).
        if let Ok(s) = unsafe { lib.get::<T>(&z) } {
            return Ok(*s);
        }
    }
    Err(format!(
        "{path} has no {}: it is not the CUDA driver library, or a driver older than fabperf \
         needs (install the NVIDIA driver's libcuda.so.1)",
        names[0]
    ))
}

impl Api {
    fn load(path: &str) -> Result<Api, String> {
        // SAFETY: loading the CUDA driver library runs its ELF initializers, which set up only
        // the library's own state; fabperf calls nothing in it before `cuInit`.
        let lib = unsafe { Library::new(path) }.map_err(|e| {
            format!(
                "GPU memory needs the CUDA driver library {path}, which could not be loaded \
                 ({e}): this host has no NVIDIA driver user-space library. Install the NVIDIA \
                 driver (libcuda.so.1 ships with the driver, not with the CUDA toolkit); in a \
                 container, run it with the NVIDIA Container Toolkit (capability `compute`) so \
                 the library is mounted, or set FABPERF_CUDA_LIBRARY to its path"
            )
        })?;
        Ok(Api {
            init: sym(&lib, path, &["cuInit"])?,
            driver_get_version: sym(&lib, path, &["cuDriverGetVersion"])?,
            device_get_count: sym(&lib, path, &["cuDeviceGetCount"])?,
            device_get: sym(&lib, path, &["cuDeviceGet"])?,
            device_get_pci_bus_id: sym(&lib, path, &["cuDeviceGetPCIBusId"])?,
            device_get_name: sym(&lib, path, &["cuDeviceGetName"])?,
            device_get_attribute: sym(&lib, path, &["cuDeviceGetAttribute"])?,
            primary_ctx_retain: sym(&lib, path, &["cuDevicePrimaryCtxRetain"])?,
            primary_ctx_release: sym(
                &lib,
                path,
                &["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"],
            )?,
            ctx_set_current: sym(&lib, path, &["cuCtxSetCurrent"])?,
            ctx_synchronize: sym(&lib, path, &["cuCtxSynchronize"])?,
            mem_alloc: sym(&lib, path, &["cuMemAlloc_v2"])?,
            mem_free: sym(&lib, path, &["cuMemFree_v2"])?,
            memset_d8: sym(&lib, path, &["cuMemsetD8_v2"])?,
            memcpy_htod: sym(&lib, path, &["cuMemcpyHtoD_v2"])?,
            memcpy_dtoh: sym(&lib, path, &["cuMemcpyDtoH_v2"])?,
            pointer_set_attribute: sym(&lib, path, &["cuPointerSetAttribute"])?,
            get_error_name: sym(&lib, path, &["cuGetErrorName"])?,
            get_error_string: sym(&lib, path, &["cuGetErrorString"])?,
            get_handle_for_address_range: sym(&lib, path, &["cuMemGetHandleForAddressRange"]).ok(),
            path: path.to_string(),
            _lib: lib,
        })
    }

    /// `CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)` for a result code.
    fn error(&self, r: CuResult) -> String {
        let text = |f: FnErrText| {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static string (or leaves it null for
            // an unknown code); `p` is a valid out-parameter.
            let rc = unsafe { f(r, &mut p) };
            if rc != CUDA_SUCCESS || p.is_null() {
                return None;
            }
            // SAFETY: non-null results are static NUL-terminated strings owned by the driver.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        match (text(self.get_error_name), text(self.get_error_string)) {
            (Some(n), Some(s)) => format!("{n} ({s})"),
            (Some(n), None) => n,
            _ => format!("CUDA error {r}"),
        }
    }

    fn check(&self, what: &str, r: CuResult) -> Result<(), String> {
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {}", self.error(r)))
        }
    }
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA driver API ({})", self.path)
    }
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The library to load: `$FABPERF_CUDA_LIBRARY`, else `libcuda.so.1`.
pub(crate) fn library_path() -> String {
    std::env::var("FABPERF_CUDA_LIBRARY")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| LIBCUDA.to_string())
}

/// Load the driver library and initialise it (once per process).
fn api() -> Result<&'static Api, String> {
    let r = API.get_or_init(|| {
        let api = Api::load(&library_path())?;
        // SAFETY: cuInit takes flags (must be 0) and has no other preconditions.
        let rc = unsafe { (api.init)(0) };
        if rc != CUDA_SUCCESS {
            return Err(format!(
                "{} loaded, but cuInit failed: {}; the NVIDIA kernel driver is not loaded or \
                 sees no GPU (`nvidia-smi` shows why; in a container, request a GPU: \
                 `nvidia.com/gpu`, or `--gpus` with docker)",
                api.path,
                api.error(rc)
            ));
        }
        Ok(api)
    });
    r.as_ref().map_err(|e| e.clone())
}

/// A GPU as the CUDA driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CudaDevice {
    /// CUDA's ordinal (its enumeration order, not the PCI order).
    pub ordinal: i32,
    /// PCI address, lowercase (`0000:1a:00.0`).
    pub bus_id: String,
    pub name: String,
}

/// The driver version as CUDA encodes it (12040 = 12.4).
pub(crate) fn driver_version() -> Result<i32, String> {
    let api = api()?;
    let mut v: c_int = 0;
    // SAFETY: one int out-parameter.
    api.check("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut v)
    })?;
    Ok(v)
}

/// The GPUs CUDA can use in this process (what `CUDA_VISIBLE_DEVICES` and a container's device
/// list leave).
pub(crate) fn devices() -> Result<Vec<CudaDevice>, String> {
    let api = api()?;
    let mut n: c_int = 0;
    // SAFETY: one int out-parameter.
    api.check("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut n)
    })?;
    let mut out = Vec::new();
    for i in 0..n {
        let mut dev: CuDevice = 0;
        // SAFETY: valid out-parameter and an ordinal below the count.
        api.check("cuDeviceGet", unsafe { (api.device_get)(&mut dev, i) })?;
        let text = |f: FnDeviceStr, what: &str| -> Result<String, String> {
            let mut buf = [0 as c_char; 128];
            // SAFETY: the driver writes at most `len` bytes, NUL-terminated, into `buf`.
            api.check(what, unsafe {
                f(buf.as_mut_ptr(), buf.len() as c_int, dev)
            })?;
            buf[buf.len() - 1] = 0;
            // SAFETY: NUL-terminated within `buf` (the last byte is forced to 0).
            Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned())
        };
        let raw = text(api.device_get_pci_bus_id, "cuDeviceGetPCIBusId")?;
        let bus_id = normalize_bus_id(&raw).unwrap_or_else(|| raw.to_lowercase());
        let name = text(api.device_get_name, "cuDeviceGetName")?;
        out.push(CudaDevice {
            ordinal: i,
            bus_id,
            name,
        });
    }
    Ok(out)
}

/// A PCI address as sysfs writes it (`0000:1a:00.0`) from the driver's form (hex fields of any
/// width and case: `00000000:1A:00.0`).
pub(crate) fn normalize_bus_id(s: &str) -> Option<String> {
    let (dbd, func) = s.trim().rsplit_once('.')?;
    let mut parts = dbd.split(':');
    let (d, b, dev) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let h = |x: &str| u32::from_str_radix(x, 16).ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        h(d)?,
        h(b)?,
        h(dev)?,
        h(func)?
    ))
}

/// One GPU's primary context, retained for as long as this value (and the memory allocated
/// in it) lives.
#[derive(Debug)]
pub(crate) struct Gpu {
    api: &'static Api,
    dev: CuDevice,
    ctx: CuContext,
    pub device: CudaDevice,
    /// The GPU can export memory as a dma-buf (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`) and
    /// the driver has `cuMemGetHandleForAddressRange`.
    pub dmabuf: bool,
}

// SAFETY: a CUDA context may be made current on any thread (every call below does so first);
// the driver API is thread-safe.
unsafe impl Send for Gpu {}
// SAFETY: as above; nothing in `Gpu` is mutated after construction.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Retain the primary context of the GPU CUDA lists as `device`.
    pub fn open(device: &CudaDevice) -> Result<Arc<Gpu>, String> {
        let api = api()?;
        let mut dev: CuDevice = 0;
        // SAFETY: valid out-parameter; the ordinal came from `devices()`.
        api.check("cuDeviceGet", unsafe {
            (api.device_get)(&mut dev, device.ordinal)
        })?;
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: valid out-parameter and device handle.
        api.check(
            &format!("cuDevicePrimaryCtxRetain on GPU {}", device.bus_id),
            unsafe { (api.primary_ctx_retain)(&mut ctx, dev) },
        )?;
        let mut attr: c_int = 0;
        // SAFETY: valid out-parameter, attribute number from cuda.h, valid device.
        let rc = unsafe { (api.device_get_attribute)(&mut attr, ATTR_DMA_BUF_SUPPORTED, dev) };
        let gpu = Gpu {
            api,
            dev,
            ctx,
            device: device.clone(),
            dmabuf: rc == CUDA_SUCCESS && attr == 1 && api.get_handle_for_address_range.is_some(),
        };
        gpu.current()?;
        Ok(Arc::new(gpu))
    }

    /// Why dma-buf export is unavailable, when it is.
    pub fn dmabuf_missing(&self) -> Option<String> {
        if self.dmabuf {
            return None;
        }
        Some(if self.api.get_handle_for_address_range.is_none() {
            format!(
                "the CUDA driver ({}) has no cuMemGetHandleForAddressRange (CUDA 11.7 or later is needed)",
                self.api.path
            )
        } else {
            format!(
                "GPU {} cannot export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: the \
                 proprietary GPU kernel module; the open one exports them)",
                self.device.bus_id
            )
        })
    }

    fn current(&self) -> Result<(), String> {
        // SAFETY: the context is retained (valid) while `self` lives.
        self.api.check("cuCtxSetCurrent", unsafe {
            (self.api.ctx_set_current)(self.ctx)
        })
    }

    /// Allocate `len` bytes of device memory (rounded up to 64 KiB, the GPU page
    /// GPUDirect RDMA pins), zeroed, marked for synchronous memory operations.
    pub fn alloc(self: &Arc<Gpu>, len: usize) -> Result<DeviceMem, String> {
        const GPU_PAGE: usize = 64 * 1024;
        let len = len.max(1).div_ceil(GPU_PAGE) * GPU_PAGE;
        self.current()?;
        let mut ptr: DevPtr = 0;
        // SAFETY: valid out-parameter; the context is current.
        self.api.check(
            &format!("cuMemAlloc of {len} bytes on GPU {}", self.device.bus_id),
            unsafe { (self.api.mem_alloc)(&mut ptr, len) },
        )?;
        let mem = DeviceMem {
            gpu: Arc::clone(self),
            ptr,
            len,
        };
        let one: c_uint = 1;
        // SAFETY: `value` points to an unsigned int as the attribute requires; `ptr` is a live
        // allocation of this context.
        self.api
            .check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
                (self.api.pointer_set_attribute)(
                    (&one as *const c_uint).cast(),
                    POINTER_ATTR_SYNC_MEMOPS,
                    ptr,
                )
            })?;
        mem.fill(0, len, 0)?;
        Ok(mem)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`, once.
        let _ = unsafe { (self.api.primary_ctx_release)(self.dev) };
    }
}

/// Device memory allocated with `cuMemAlloc`, freed on drop unless leaked (a memory region
/// that could not be deregistered still covers it).
#[derive(Debug)]
pub(crate) struct DeviceMem {
    gpu: Arc<Gpu>,
    ptr: DevPtr,
    len: usize,
}

impl DeviceMem {
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn range(&self, off: usize, n: usize) -> Result<DevPtr, String> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(self.ptr + off as u64),
            _ => Err(format!(
                "GPU buffer access {off}+{n} outside {} bytes",
                self.len
            )),
        }
    }

    /// Set bytes `off..off + n` to `v` and wait until done.
    pub fn fill(&self, off: usize, n: usize, v: u8) -> Result<(), String> {
        let p = self.range(off, n)?;
        let api = self.gpu.api;
        self.gpu.current()?;
        // SAFETY: the range lies inside this live allocation (checked).
        api.check("cuMemsetD8", unsafe { (api.memset_d8)(p, v, n) })?;
        // SAFETY: no arguments; the context is current.
        api.check("cuCtxSynchronize", unsafe { (api.ctx_synchronize)() })
    }

    /// Copy one byte to device memory.
    pub fn store(&self, off: usize, v: u8) -> Result<(), String> {
        let p = self.range(off, 1)?;
        self.gpu.current()?;
        // SAFETY: one byte from a live local to a checked device address.
        self.gpu.api.check("cuMemcpyHtoD", unsafe {
            (self.gpu.api.memcpy_htod)(p, (&v as *const u8).cast(), 1)
        })
    }

    /// Copy one byte from device memory.
    pub fn load(&self, off: usize) -> Result<u8, String> {
        let p = self.range(off, 1)?;
        self.gpu.current()?;
        let mut v = 0u8;
        // SAFETY: one byte from a checked device address into a live local.
        self.gpu.api.check("cuMemcpyDtoH", unsafe {
            (self.gpu.api.memcpy_dtoh)((&mut v as *mut u8).cast(), p, 1)
        })?;
        Ok(v)
    }

    /// Export the allocation as a dma-buf: the file descriptor and the offset of the
    /// allocation inside it (the export covers whole host pages).
    pub fn export_dmabuf(&self) -> Result<(OwnedFd, u64), String> {
        let api = self.gpu.api;
        let Some(get) = api.get_handle_for_address_range else {
            return Err(self
                .gpu
                .dmabuf_missing()
                .unwrap_or_else(|| "no dma-buf export".into()));
        };
        let page = page_size() as u64;
        let start = self.ptr & !(page - 1);
        let offset = self.ptr - start;
        let size = (offset + self.len as u64).div_ceil(page) * page;
        self.gpu.current()?;
        let mut fd: c_int = -1;
        // SAFETY: `handle` is an int out-parameter as CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
        // requires; the page-aligned range covers only this allocation's pages.
        api.check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
            get(
                (&mut fd as *mut c_int).cast(),
                start,
                size as usize,
                HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err("cuMemGetHandleForAddressRange returned no file descriptor".into());
        }
        // SAFETY: the driver just created this descriptor for us; nothing else owns it.
        Ok((unsafe { OwnedFd::from_raw_fd(fd) }, offset))
    }

    /// Free now, reporting the driver's answer.
    pub fn free(self) -> Result<(), String> {
        let me = std::mem::ManuallyDrop::new(self);
        me.gpu.current()?;
        // SAFETY: frees this allocation exactly once (`me` is never dropped).
        let r = me
            .gpu
            .api
            .check("cuMemFree", unsafe { (me.gpu.api.mem_free)(me.ptr) });
        // Release the context reference held by `me`.
        // SAFETY: `me.gpu` is read once and then forgotten with `me`.
        drop(unsafe { std::ptr::read(&me.gpu) });
        r
    }

    /// Never free it (a memory region may still cover it).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if self.gpu.current().is_ok() {
            // SAFETY: frees this allocation exactly once.
            let _ = unsafe { (self.gpu.api.mem_free)(self.ptr) };
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf takes any name and only returns a value.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_in_sysfs_form() {
        assert_eq!(
            normalize_bus_id("00000000:1A:00.0").as_deref(),
            Some("0000:1a:00.0")
        );
        assert_eq!(
            normalize_bus_id("0000:3b:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(normalize_bus_id("1a:00.0"), None);
        assert_eq!(normalize_bus_id("x:1a:00.0"), None);
    }

    #[test]
    fn a_missing_library_is_named_with_the_fix() {
        let e = Api::load("/nonexistent/libcuda.so.1").unwrap_err();
        assert!(
            e.contains("CUDA driver library /nonexistent/libcuda.so.1"),
            "{e}"
        );
        assert!(e.contains("Install the NVIDIA driver"), "{e}");
        assert!(e.contains("FABPERF_CUDA_LIBRARY"), "{e}");
    }

    #[test]
    fn a_library_that_is_not_libcuda_is_refused_by_symbol() {
        // libc exists everywhere and has none of the driver API.
        let e = Api::load("libc.so.6").unwrap_err();
        assert!(e.contains("libc.so.6 has no cuInit"), "{e}");
        assert!(e.contains("not the CUDA driver library"), "{e}");
    }
}
