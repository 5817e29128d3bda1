cdef class BlockPool:
    cdef public long num_gpu_blocks, _stamp, _head, _tail, num_free, null_block
    cdef public bint enable_caching
    cdef public list block_hash
    cdef public object ref_cnt, tag, _next, _prev
    cdef long[::1] _rc, _tg, _nx, _pv
    cdef list _ids
    cdef public dict _cached
    cpdef _bind(self)
    cpdef long _popleft(self) except? -1
    cpdef _remove(self, long b)
    cpdef _evict_hash(self, long b)
    cpdef valid_unique(self, list entries)
    cpdef cache_block(self, long b, key)
    cpdef list get_new_blocks(self, long k)
    cpdef touch(self, blocks)
    cpdef long num_evictable(self, blocks) except? -1
    cpdef free_request_blocks(self, list blocks, long num_hashed, bint exclusive)
    cpdef _link_freed(self, list first, list last)
