/* placeholder: being written */
typedef int dg_placeholder_ref64_train;
