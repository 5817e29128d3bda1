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
    cdef public list durations, starts, running
    cdef public dict memo
