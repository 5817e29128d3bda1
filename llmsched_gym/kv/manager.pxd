from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.block_pool cimport BlockPool

cpdef long cdiv(long a, long b) except? -1

cdef class KVCacheManager:
    cdef public long block_size, queries, hits, preempted_queries, preempted_hits
    cdef public bint enable_caching, output_keys
    cdef public BlockPool pool
    cpdef tuple get_computed_blocks(self, Request req)
    cpdef record_lookup(self, Request req, long num_hit_tokens)
    cpdef bint surely_blocked(self, Request req) except -1
    cpdef long blocks_to_admit(self, Request req, list hit_blocks) except? -1
    cpdef allocate_slots(self, Request req, long num_new_tokens, hit_blocks=*, long num_lookahead_tokens=*, bint full_sequence_must_fit=*)
    cpdef cache_blocks(self, Request req, long num_tokens)
    cpdef free(self, Request req, bint preempted=*)
