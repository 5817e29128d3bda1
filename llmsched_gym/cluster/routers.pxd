from llmsched_gym.core.engine cimport Engine
from llmsched_gym.core.request cimport Request

cdef class InstanceView:
    cdef public object index, name, gpu, model, role, _backlog, _instance
    cdef public object _engine
    cpdef long _num_requests(self) except? -1
