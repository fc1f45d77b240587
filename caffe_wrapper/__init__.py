"""Caffe: the spec as a prototxt NetParameter trained by Caffe's own solvers
(the declarative route of the comparison). Real content arrives with its issue;
until then no entry script uses this package."""
