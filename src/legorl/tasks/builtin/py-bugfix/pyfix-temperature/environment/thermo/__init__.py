from thermo.units import c_to_f, convert, f_to_c
