int kv_fn_stub_workload;
