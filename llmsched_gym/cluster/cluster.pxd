from llmsched_gym.core.engine cimport Engine
from llmsched_gym.cluster.routers cimport InstanceView
from llmsched_gym.core.request cimport Request
