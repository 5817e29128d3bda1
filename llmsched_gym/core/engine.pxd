from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.manager cimport KVCacheManager
from llmsched_gym.kv.block_pool cimport BlockPool

cdef class StepContext:
    cdef public object _engine, config, now, waiting
    cdef public KVCacheManager _kv
    cdef public long block_size, max_num_seqs, step, token_budget, num_eligible
    cdef public dict scheduled
    cdef public list new, resumed, preempted, running
    cdef public bint _held
    cdef public long _tokens, _prefill_attn, _decode_kv, _prefill_kv, _num_prefill, _num_decode

cdef class Engine:
    cdef public object _plan, config, policy, cost_model, _decode_series_longest, schedule_log
    cdef public object waiting, now, _until, jobs, _steps
    cdef object __weakref__
    cdef public list finished, aborted, unlogged_aborts, _cancels, _pending, finish_listeners, itl_values, itl_weights, _running
    cdef public dict _external
    cdef public StepContext ctx
    cdef public KVCacheManager _kv
    cdef public bint async_scheduling, lazy_stretches, fast_forward, _prefill_kv_feature, _phase_items, _item_priced, record_steps
    cdef public long num_steps, num_ff_steps, num_preemptions, _stall, _unsampled, _unsampled_preemptions
    cdef public long _next_arrival, _seq, waiting_tokens, running_tokens, running_prefills
    cpdef next_event_time(self)
    cpdef bint _ready(self, until) except -1
    cpdef bint advance(self, until=*) except -1
    cpdef _admit_arrivals(self)
    cpdef bint _continue_stretch(self, until) except -1

cdef class _Stretch:
    cdef public long bs, k, longest, m0, n
    cdef public object t_arr, rooms
    cdef public list durations, starts, running
    cdef public dict memo
