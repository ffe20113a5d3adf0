/* The extension-module stub of a C library that charllm-trace calls through ctypes
 * (core/native_libs.py). Built as an extension module only so that pip compiles the library at
 * install time and the import system names and places it; the module has no functions.
 * SOURCE_SHA256 is the SHA-256 of the library's sources and headers as setup.py built them, so a
 * test can tell a stale build in a checkout. Include <Python.h> first, then this header, and write
 * CHARLLM_CTYPES_STUB(_name) once at the end of the library's first source. */
#ifndef CHARLLM_CTYPES_STUB_H
#define CHARLLM_CTYPES_STUB_H

#ifndef CHARLLM_SOURCE_SHA256
#define CHARLLM_SOURCE_SHA256 "unknown"
#endif

#define CHARLLM_CTYPES_STUB(NAME)                                                                        \
    static struct PyModuleDef stub_module = {                                                            \
        PyModuleDef_HEAD_INIT, #NAME, "C functions called through ctypes (no Python functions).", -1, NULL, \
    };                                                                                                   \
    PyMODINIT_FUNC PyInit_##NAME(void) {                                                                 \
        PyObject *m = PyModule_Create(&stub_module);                                                     \
        if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA256", CHARLLM_SOURCE_SHA256) < 0) {    \
            Py_DECREF(m);                                                                                \
            return NULL;                                                                                 \
        }                                                                                                \
        return m;                                                                                        \
    }

#endif
