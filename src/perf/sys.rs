//! Stage 2 (perf), syscall layer: the only file that calls `perf_event_open`, `ioctl`,
//! `mmap`, `munmap`, `madvise`, `poll` and the `read` of a counter. Each wrapper is safe, returns `io::Result`, and hands out
//! fds as `OwnedFd` the moment the kernel returns them. It must not interpret records or
//! know about events, CPUs or rings beyond the raw calls.

use std::ffi::{c_int, c_long, c_void, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Duration;

use perf_event_open_sys as sys;
use perf_event_open_sys::bindings::perf_event_attr;

/// Return values that signal failure with `-1` and leave the cause in `errno`.
trait MinusOne: Copy {
    fn is_minus_one(self) -> bool;
}

impl MinusOne for c_int {
    fn is_minus_one(self) -> bool {
        self == -1
    }
}

impl MinusOne for c_long {
    fn is_minus_one(self) -> bool {
        self == -1
    }
}

impl MinusOne for *mut c_void {
    // MAP_FAILED is `(void *)-1`.
    fn is_minus_one(self) -> bool {
        self == libc::MAP_FAILED
    }
}

/// The one errno helper: turns the C convention (-1 + errno) into `io::Error`.
/// `errno` must be read right after the call, before anything else can clobber it,
/// which is why the call itself is passed in as a closure.
fn check<T: MinusOne>(call: impl FnOnce() -> T) -> io::Result<T> {
    let ret = call();
    if ret.is_minus_one() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `perf_event_open(2)`. `group_fd = None` opens a group leader (-1).
pub fn perf_event_open(
    attr: &perf_event_attr,
    pid: i32,
    cpu: i32,
    group_fd: Option<BorrowedFd<'_>>,
    flags: u64,
) -> io::Result<OwnedFd> {
    // The kernel may write the size it expects back into `attr.size` (E2BIG), so it gets a
    // private copy rather than a pointer into the caller's shared borrow.
    let mut attr = *attr;
    let group = group_fd.map_or(-1, |fd| fd.as_raw_fd());
    let fd = check(|| {
        // SAFETY: `attr` is a fully initialised perf_event_attr that lives for the whole
        // call; `group` is -1 or a borrowed (hence open) fd; the syscall neither keeps the
        // pointer nor touches memory other than `attr`.
        unsafe { sys::perf_event_open(&mut attr, pid, cpu, group, flags as std::ffi::c_ulong) }
    })?;
    // SAFETY: the syscall succeeded, so `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `PERF_EVENT_IOC_ENABLE`.
pub fn enable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is open for the duration of the borrow; ENABLE takes an integer flag
    // argument and reads no memory.
    check(|| unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) }).map(drop)
}

/// `PERF_EVENT_IOC_DISABLE`.
pub fn disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: as for `enable`: open fd, integer argument, no memory access.
    check(|| unsafe { sys::ioctls::DISABLE(fd.as_raw_fd(), 0) }).map(drop)
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records into `target`'s ring buffer.
pub fn set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both fds are open for the duration of their borrows; the argument is an fd
    // number, no memory is accessed.
    check(|| unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) }).map(drop)
}

/// `PERF_EVENT_IOC_SET_FILTER` with an ftrace filter expression.
pub fn set_filter(fd: BorrowedFd<'_>, filter: &CStr) -> io::Result<()> {
    // SAFETY: `filter` is a NUL-terminated string alive for the whole call; the kernel
    // only reads it (copies it in with strndup_user) despite the `*mut` in the binding.
    check(|| unsafe { sys::ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_ptr().cast_mut()) })
        .map(drop)
}

/// `PERF_EVENT_IOC_ID`: the id the kernel puts in `PERF_SAMPLE_IDENTIFIER`.
pub fn event_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut id: u64 = 0;
    // SAFETY: `id` is a valid, writable u64 for the whole call, which is all ID writes.
    check(|| unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) })?;
    Ok(id)
}

/// `read(2)` of a perf event: its counter, in the layout its `read_format` asked for.
/// Returns the bytes read (8 per u64 the layout holds).
pub fn read_counter(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    nix::unistd::read(fd.as_raw_fd(), buf).map_err(io::Error::from)
}

/// The system page size; perf ring sizes are counted in these.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // sysconf cannot fail for _SC_PAGESIZE on Linux; 4096 keeps us defined if it ever did.
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// `mmap(NULL, len, PROT_READ|PROT_WRITE, flags, fd, 0)`: a fresh range the caller
/// owns and must unmap (`fd` -1 with `MAP_ANONYMOUS`).
fn map_fresh(len: usize, flags: c_int, fd: c_int) -> io::Result<NonNull<u8>> {
    let ptr = check(|| {
        // SAFETY: a NULL hint lets the kernel pick a fresh range, so no existing memory
        // is replaced; `fd` is open for the call (or unused); the result is checked.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        }
    })?;
    NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned a null mapping"))
}

/// A shared read/write mapping of a perf fd. Unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned exclusively by this value; nothing about it is
// tied to the thread that created it, so moving it to another thread is sound.
unsafe impl Send for Mapping {}

impl Mapping {
    /// `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0)`. Write access is what
    /// tells the kernel we will advance `data_tail` (non-overwrite mode).
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        let ptr = map_fresh(len, libc::MAP_SHARED, fd.as_raw_fd())?;
        Ok(Mapping { ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and nothing else unmaps them;
        // every reference into the mapping borrows `self`, so none outlives this call.
        // There is nothing useful to do if munmap fails while dropping.
        let _ = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The huge page size [`HugeBuf`] aligns to (x86-64 and arm64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Private anonymous memory, zero-filled, that the kernel is asked to back with huge
/// pages (`MADV_HUGEPAGE`): memory written once and kept (`--defer`) then takes one
/// page fault per 2 MiB instead of one per 4 KiB page, which measured as half of a
/// deferring reader's CPU. Where transparent huge pages are off it is plain memory.
/// Unmapped on drop.
#[derive(Debug)]
pub struct HugeBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: as for `Mapping`: memory owned by this value alone, tied to no thread.
unsafe impl Send for HugeBuf {}

impl HugeBuf {
    /// At least `len` bytes, a whole number of huge pages starting on a huge-page
    /// boundary (a mapping that does not is only partly backed by huge pages).
    pub fn new(len: usize) -> io::Result<HugeBuf> {
        let too_large = || io::Error::from(io::ErrorKind::OutOfMemory);
        let len = len
            .max(1)
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or_else(too_large)?;
        // One huge page more than asked, so that an aligned range fits; the rest is
        // unmapped again.
        let span = len.checked_add(HUGE_PAGE).ok_or_else(too_large)?;
        let raw = map_fresh(span, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?.as_ptr();
        let head = (raw as usize).next_multiple_of(HUGE_PAGE) - raw as usize;
        // SAFETY: `head + len <= span`, so both offsets stay inside the mapping.
        let (start, tail) = unsafe { (raw.add(head), raw.add(head + len)) };
        // SAFETY: the head and the tail are the parts of the mapping just made that lie
        // outside [start, start + len); nothing refers to them. A failed unmap only
        // leaves them mapped and unused.
        unsafe {
            if head > 0 {
                libc::munmap(raw.cast(), head);
            }
            if span - head - len > 0 {
                libc::munmap(tail.cast(), span - head - len);
            }
        }
        // SAFETY: [start, start + len) is mapped and ours; the advice changes how it is
        // backed, not what it holds. EINVAL (no transparent huge pages) leaves it plain.
        let _ = unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
        let ptr = NonNull::new(start).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(HugeBuf { ptr, len })
    }

    /// Fault every page in now (the kernel zeroes them here, not at the first write of
    /// whoever takes the buffer): one write per 4 KiB, which with huge pages faults
    /// 2 MiB at once and finds the rest present.
    pub fn populate(&mut self) {
        for at in (0..self.len).step_by(4096) {
            // SAFETY: `at < len`, so the byte is inside the mapping, which `&mut self`
            // borrows alone; volatile, so the write of the zero it holds is not elided.
            unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(at), 0) };
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes at `ptr` are mapped, initialised (zero-filled) and borrowed
        // with `self`, which unmaps them only when dropped.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the range kept by `new`, unmapped only here; every
        // slice into it borrows `self`.
        let _ = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `poll(2)` over `fds`. The timeout is rounded up to whole milliseconds so a short, non-zero
/// timeout never turns into a busy loop.
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let mut ms = timeout.as_millis();
    if ms == 0 && !timeout.is_zero() {
        ms = 1;
    }
    let ms = c_int::try_from(ms).unwrap_or(c_int::MAX);
    let n = check(|| {
        // SAFETY: the pointer and length describe a live, writable slice of pollfd for
        // the whole call; the kernel writes only their `revents` fields.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) }
    })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// `sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, prio)` for the calling
/// thread: the command it starts afterwards runs at normal priority again.
pub fn set_fifo(prio: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    let policy = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;
    // SAFETY: `param` is a valid sched_param alive for the call, which only reads it.
    check(|| unsafe { libc::sched_setscheduler(0, policy, &param) }).map(drop)
}

/// `sched_setscheduler(0, SCHED_IDLE, 0)` for the calling thread: it runs only on CPU
/// time no other task wants.
pub fn set_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param alive for the call, which only reads it.
    check(|| unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_buffers_are_whole_huge_pages_aligned_zeroed_and_writable() {
        for len in [1, HUGE_PAGE, HUGE_PAGE + 1] {
            let mut b = HugeBuf::new(len).unwrap();
            b.populate();
            let s = b.as_mut_slice();
            assert_eq!(s.len(), len.next_multiple_of(HUGE_PAGE), "{len}");
            assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0, "{len}");
            assert!(s.iter().all(|&x| x == 0), "{len}");
            let n = s.len();
            s[0] = 1;
            s[n - 1] = 2;
            assert_eq!((b.as_slice()[0], b.as_slice()[n - 1]), (1, 2), "{len}");
        }
        assert!(HugeBuf::new(usize::MAX).is_err());
    }
}
