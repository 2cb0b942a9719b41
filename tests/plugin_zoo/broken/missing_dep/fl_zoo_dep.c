/* fl_zoo_dep.c — a library the zoo's missing-dependency plugin links against. It is built
 * here, in a directory no plugin's rpath names, so loading that plugin fails at "open". */
int fl_zoo_dep_answer(void) { return 42; }
