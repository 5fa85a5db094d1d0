"""pi0.5 in JAX and the OxyGen engine; never imports ROS, so it runs and tests anywhere."""
