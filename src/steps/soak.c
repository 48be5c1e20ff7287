/* placeholder: being written */
typedef int dg_placeholder_soak;
