from llmsched_gym.core.context cimport StepContext

cdef class StepPricer:
    cdef public object cost_model, _series, _series_longest
    cdef public bint phase_items, needs_longest
    cpdef price(self, StepContext ctx)

cdef class _PrefillKVPricer(StepPricer):
    cpdef price(self, StepContext ctx)

cdef class _ItemPricer(StepPricer):
    cpdef price(self, StepContext ctx)
