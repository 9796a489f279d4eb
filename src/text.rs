//! The one call left in reading a large `str` from the cache (python/sdax_hamilton/_hamilton/
//! cache_io.py): its pieces joined into one `str`. `str.join` copies every byte into fresh
//! memory with the interpreter lock held, and the first touch of each page of that memory is
//! a page fault: about 20 ms for 50 MB here, all of it time the event loop waits. For ASCII
//! pieces (the common case of large text, and the only one whose layout the limited API lets
//! us reach), the new `str` is made empty with the lock held and filled without it.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

#[allow(unsafe_code)]
unsafe extern "C" {
    // Not in the limited API, exported by every CPython the wheel supports (3.3 onwards): the
    // one way to make a `str` whose bytes are written after it exists, as CPython's own
    // `str.join` does.
    fn PyUnicode_New(size: ffi::Py_ssize_t, maxchar: ffi::Py_UCS4) -> *mut ffi::PyObject;
}

/// `"".join(pieces)` for a list of ASCII `str` pieces, the bytes copied while the
/// interpreter lock is free. A piece that is not an ASCII `str` is a `ValueError` (the
/// caller joins such pieces with `str.join`); nothing is copied then.
#[pyfunction]
pub(crate) fn join_ascii<'py>(
    py: Python<'py>,
    pieces: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyString>> {
    // Strong references, kept until the copy is over: the list may change meanwhile.
    let mut held: Vec<Py<PyString>> = Vec::with_capacity(pieces.len());
    let mut sources: Vec<(usize, usize)> = Vec::with_capacity(pieces.len());
    let mut total: usize = 0;
    for piece in pieces.iter() {
        let text = piece
            .cast_into::<PyString>()
            .map_err(|_| PyValueError::new_err("join_ascii takes a list of str pieces"))?;
        let chars = text.len()?;
        let bytes = text.to_str()?;
        if bytes.len() != chars {
            return Err(PyValueError::new_err("join_ascii takes ASCII pieces only"));
        }
        sources.push((bytes.as_ptr() as usize, bytes.len()));
        total = total
            .checked_add(bytes.len())
            .ok_or_else(|| PyOverflowError::new_err("the joined str is too long"))?;
        held.push(text.unbind());
    }
    let size = ffi::Py_ssize_t::try_from(total)
        .map_err(|_| PyOverflowError::new_err("the joined str is too long"))?;
    // SAFETY: `PyUnicode_New` with the GIL held returns a new reference (or NULL with an
    // error set, which `from_owned_ptr_or_err` turns into the error). Its data is `total`
    // bytes of ASCII (maxchar 127), written below before the object is shared.
    #[allow(unsafe_code)]
    let joined = unsafe { Bound::from_owned_ptr_or_err(py, PyUnicode_New(size, 127))? };
    let mut length: ffi::Py_ssize_t = 0;
    // SAFETY: for a compact ASCII `str` (what `PyUnicode_New(_, 127)` makes) the UTF-8
    // pointer is the object's own data, `length` bytes, allocated with the object.
    #[allow(unsafe_code)]
    let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(joined.as_ptr(), &mut length) };
    if data.is_null() {
        return Err(PyErr::fetch(py));
    }
    if length != size {
        return Err(PyValueError::new_err(
            "join_ascii: the new str has another size",
        ));
    }
    let target = data as usize;
    py.detach(move || {
        let mut at = 0usize;
        for (source, len) in sources {
            // SAFETY: each source is the data of an immutable `str` held in `held` until
            // after this closure; the target is the data of `joined`, which nothing else can
            // see yet, with room for `total` bytes; the ranges do not overlap.
            #[allow(unsafe_code)]
            unsafe {
                std::ptr::copy_nonoverlapping(
                    source as *const u8,
                    (target as *mut u8).add(at),
                    len,
                );
            }
            at += len;
        }
    });
    drop(held);
    joined.cast_into::<PyString>().map_err(PyErr::from)
}
