from llmsched_gym.core.context cimport StepContext
from llmsched_gym.core.engine cimport Engine
from llmsched_gym.core.pricing cimport StepPricer
from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.manager cimport KVCacheManager

cdef class _Batch:
    cdef public dict scheduled
    cdef public list samplers
    cdef public object start, end, line, row

cdef class AsyncLoop:
    cdef public Engine engine
    cdef public dict stale
    cdef public bint finished_since_schedule, priority, continue_after_self
    cdef public object queue, gpu_free
    cpdef bint _try_stretch(self) except -1
    cpdef _Batch schedule(self)
    cpdef _running_phase(self, StepContext ctx)
    cpdef _preempt(self, StepContext ctx, Request req)
    cpdef apply(self, _Batch batch)
    cpdef _finish(self, list finished, end)
    cpdef _price_one(self, list durations, list starts, long n, long m, long longest)
    cpdef _price_after_finish(self, list durations, list starts, long k, long n, long m)
    cpdef _advance_stretch(self, long j, list durations, list starts, bint finish)
    cpdef tuple _log_stretch(self, long j, list starts, list durations, list free_after, list finished, list kept)
