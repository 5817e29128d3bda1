# Cimported under another name: engine.py imports (and re-exports) StepContext itself.
from llmsched_gym.core.context cimport StepContext as _StepContext
from llmsched_gym.core.pricing cimport StepPricer
from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.manager cimport KVCacheManager

cdef class Engine:
    cdef public object _plan, config, policy, cost_model, schedule_log
    cdef public object waiting, now, _until, jobs, _steps
    cdef object __weakref__
    cdef public list finished, aborted, unlogged_aborts, _cancels, _pending, finish_listeners, token_listeners, batch_listeners, itl_values, itl_weights, _running
    cdef public dict _external
    cdef public _StepContext ctx
    cdef public StepPricer pricer
    cdef public KVCacheManager _kv
    cdef public bint async_scheduling, lazy_stretches, fast_forward, record_steps
    cdef public long num_steps, num_ff_steps, num_preemptions, _stall, _unsampled, _unsampled_preemptions
    cdef public long _next_arrival, _seq, waiting_tokens, running_tokens, running_prefills
    cpdef next_event_time(self)
    cpdef double next_finish_start(self, double stop) except? -1.0
    cpdef bint _ready(self, until) except -1
    cpdef bint advance(self, until=*) except -1
    cpdef _admit_arrivals(self)
    cpdef long _sample(self, _StepContext ctx, end, duration, list finished) except -1
    cpdef _check_progress(self, _StepContext ctx, long num_partial)
