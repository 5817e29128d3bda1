from llmsched_gym.core.request cimport Request
from llmsched_gym.kv.manager cimport KVCacheManager

cdef class StepContext:
    cdef public object _engine, config, now, waiting
    cdef public KVCacheManager _kv
    cdef public long block_size, max_num_seqs, step, token_budget, num_eligible
    cdef public dict scheduled
    cdef public list new, resumed, preempted, running
    cdef public bint _held
    cdef public long _tokens, _prefill_attn, _decode_kv, _prefill_kv, _num_prefill, _num_decode
