/* A shared object without the entry symbol: the loader must refuse it. */
int fp4_not_a_plugin(void);
int fp4_not_a_plugin(void)
{
    return 42;
}
