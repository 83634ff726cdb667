int kv_fn_stub_main;
int main(void){return 0;}
