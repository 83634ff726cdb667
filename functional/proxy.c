int kv_fn_stub_proxy;
