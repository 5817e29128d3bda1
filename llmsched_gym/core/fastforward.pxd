# The engine imports this module as a module (``_ff``): this one cimports Engine, so either may
# be imported first.
from llmsched_gym.core.engine cimport Engine
from llmsched_gym.core.pricing cimport StepPricer
from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.block_pool cimport BlockPool
from llmsched_gym.kv.manager cimport KVCacheManager

cdef class PendingStretch:
    cdef public long bs, k, longest, m0, n
    cdef public object t_arr, rooms
    cdef public list durations, starts, running, ahead_d, ahead_s
    cdef public long ahead_pos
    cdef public dict memo

# Module functions as C functions: calls inside this module (the engine's stretches) skip
# Python's call machinery; other modules call them as Python functions. (try_fast_forward stays
# a def: Cython compiles no generator expression inside a cpdef.)
cpdef list block_rooms(list running, long bs)
cpdef long count_allocations(list offsets, long bs, long k) except? -1
cpdef long max_steps_within_blocks(list offsets, long bs, long free, long k_max) except? -1
cpdef long steps_within_blocks(list running, long bs, long free, long k, list rooms=*) except? -1
cpdef long steps_to_first_finish(list running) except? -1
cpdef long context_sum(list running) except? -1
cpdef bint head_fits(KVCacheManager kv, Request head) except -1
cpdef long steps_before_hit_grows(KVCacheManager kv, Request head, list running, long k, long lag) except? -1
cpdef stretch_end(list pending, long next_arrival, list cancels)
cpdef list free_after_steps(list events, long n, long k, long free)
cpdef place_blocks(BlockPool pool, list running, list events, long n)
cpdef bint continue_stretch(Engine eng, until) except -1
cpdef double finish_start(Engine eng, double stop) except? -1.0
cpdef advance_decode_stretch(Engine eng, long k, list durations, list starts)
cpdef _log_stretch(Engine eng, long k, list starts, list durations, list free_after, list finished_ids)
