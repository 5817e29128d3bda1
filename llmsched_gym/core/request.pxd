cdef class Request:
    cdef public object spec, request_id, arrival_time, status, _keys, _unique_entries
    cdef public list blocks
    cdef public object first_scheduled_time, first_token_time, finish_time, last_token_time
    cdef public object priority
    cdef public long max_tokens
    cdef public long seq, num_prompt_tokens, num_tokens, num_output_tokens, num_computed_tokens
    cdef public long num_preemptions, num_cached_blocks, _num_shareable_blocks, _output_len
    cdef public long num_cached_tokens, num_computed_total, scheduled_in_step
    cdef public long num_external_tokens, refill_tokens, num_output_placeholders
