// catch_main.cpp — Catch2's main for the plugin zoo's tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
