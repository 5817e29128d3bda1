from llmsched_gym.core.engine cimport Engine
