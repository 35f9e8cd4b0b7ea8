pub use root::*;

const _: () = ::planus::check_version_compatibility("planus-1.3.0");

/// The root namespace
///
/// Generated from these locations:
/// * File `schema/etdump_schema_flatcc.fbs`
#[no_implicit_prelude]
#[allow(clippy::needless_lifetimes)]
mod root {
    /// The namespace `etdump`
    ///
    /// Generated from these locations:
    /// * File `schema/etdump_schema_flatcc.fbs`
    pub mod etdump {
        /// The table `Null` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Null` in the file `schema/etdump_schema_flatcc.fbs:10`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct Null {}

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Null {
            fn default() -> Self {
                Self {}
            }
        }

        impl Null {
            /// Creates a [NullBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> NullBuilder<()> {
                NullBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(builder: &mut ::planus::Builder) -> ::planus::Offset<Self> {
                let table_writer: ::planus::table_writer::TableWriter<4> =
                    ::core::default::Default::default();
                unsafe {
                    table_writer.finish(builder, |_table_writer| {});
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Null>> for Null {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Null> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Null>> for Null {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Null>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Null> for Null {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Null> {
                Null::create(builder)
            }
        }

        /// Builder for serializing an instance of the [Null] type.
        ///
        /// Can be created using the [Null::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct NullBuilder<State>(State);

        impl NullBuilder<()> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Null].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Null>
            where
                Self: ::planus::WriteAsOffset<Null>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Null>> for NullBuilder<()> {
            type Prepared = ::planus::Offset<Null>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Null> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Null>> for NullBuilder<()> {
            type Prepared = ::planus::Offset<Null>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Null>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Null> for NullBuilder<()> {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Null> {
                Null::create(builder)
            }
        }

        /// Reference to a deserialized [Null].
        #[derive(Copy, Clone)]
        pub struct NullRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> NullRef<'a> {}

        impl<'a> ::core::fmt::Debug for NullRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("NullRef");

                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<NullRef<'a>> for Null {
            type Error = ::planus::Error;

            fn try_from(_value: NullRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {})
            }
        }

        impl<'a> ::planus::TableRead<'a> for NullRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for NullRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[NullRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Null>> for Null {
            type Value = ::planus::Offset<Null>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Null>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for NullRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[NullRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Tensor` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Tensor` in the file `schema/etdump_schema_flatcc.fbs:12`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct Tensor {
            /// The field `scalar_type` in the table `Tensor`
            pub scalar_type: super::executorch_flatbuffer::ScalarType,
            /// The field `sizes` in the table `Tensor`
            pub sizes: ::core::option::Option<::planus::alloc::vec::Vec<i64>>,
            /// The field `strides` in the table `Tensor`
            pub strides: ::core::option::Option<::planus::alloc::vec::Vec<i64>>,
            /// The field `offset` in the table `Tensor`
            pub offset: i64,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Tensor {
            fn default() -> Self {
                Self {
                    scalar_type: super::executorch_flatbuffer::ScalarType::Byte,
                    sizes: ::core::default::Default::default(),
                    strides: ::core::default::Default::default(),
                    offset: 0,
                }
            }
        }

        impl Tensor {
            /// Creates a [TensorBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> TensorBuilder<()> {
                TensorBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_scalar_type: impl ::planus::WriteAsDefault<
                    super::executorch_flatbuffer::ScalarType,
                    super::executorch_flatbuffer::ScalarType,
                >,
                field_sizes: impl ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
                field_strides: impl ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
                field_offset: impl ::planus::WriteAsDefault<i64, i64>,
            ) -> ::planus::Offset<Self> {
                let prepared_scalar_type = field_scalar_type
                    .prepare(builder, &super::executorch_flatbuffer::ScalarType::Byte);
                let prepared_sizes = field_sizes.prepare(builder);
                let prepared_strides = field_strides.prepare(builder);
                let prepared_offset = field_offset.prepare(builder, &0);

                let mut table_writer: ::planus::table_writer::TableWriter<12> =
                    ::core::default::Default::default();
                if prepared_offset.is_some() {
                    table_writer.write_entry::<i64>(3);
                }
                if prepared_sizes.is_some() {
                    table_writer.write_entry::<::planus::Offset<[i64]>>(1);
                }
                if prepared_strides.is_some() {
                    table_writer.write_entry::<::planus::Offset<[i64]>>(2);
                }
                if prepared_scalar_type.is_some() {
                    table_writer.write_entry::<super::executorch_flatbuffer::ScalarType>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_offset) = prepared_offset {
                            object_writer.write::<_, _, 8>(&prepared_offset);
                        }
                        if let ::core::option::Option::Some(prepared_sizes) = prepared_sizes {
                            object_writer.write::<_, _, 4>(&prepared_sizes);
                        }
                        if let ::core::option::Option::Some(prepared_strides) = prepared_strides {
                            object_writer.write::<_, _, 4>(&prepared_strides);
                        }
                        if let ::core::option::Option::Some(prepared_scalar_type) =
                            prepared_scalar_type
                        {
                            object_writer.write::<_, _, 1>(&prepared_scalar_type);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Tensor>> for Tensor {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Tensor> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Tensor>> for Tensor {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Tensor>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Tensor> for Tensor {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Tensor> {
                Tensor::create(
                    builder,
                    self.scalar_type,
                    &self.sizes,
                    &self.strides,
                    self.offset,
                )
            }
        }

        /// Builder for serializing an instance of the [Tensor] type.
        ///
        /// Can be created using the [Tensor::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct TensorBuilder<State>(State);

        impl TensorBuilder<()> {
            /// Setter for the [`scalar_type` field](Tensor#structfield.scalar_type).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn scalar_type<T0>(self, value: T0) -> TensorBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<
                        super::executorch_flatbuffer::ScalarType,
                        super::executorch_flatbuffer::ScalarType,
                    >,
            {
                TensorBuilder((value,))
            }

            /// Sets the [`scalar_type` field](Tensor#structfield.scalar_type) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn scalar_type_as_default(self) -> TensorBuilder<(::planus::DefaultValue,)> {
                self.scalar_type(::planus::DefaultValue)
            }
        }

        impl<T0> TensorBuilder<(T0,)> {
            /// Setter for the [`sizes` field](Tensor#structfield.sizes).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn sizes<T1>(self, value: T1) -> TensorBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            {
                let (v0,) = self.0;
                TensorBuilder((v0, value))
            }

            /// Sets the [`sizes` field](Tensor#structfield.sizes) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn sizes_as_null(self) -> TensorBuilder<(T0, ())> {
                self.sizes(())
            }
        }

        impl<T0, T1> TensorBuilder<(T0, T1)> {
            /// Setter for the [`strides` field](Tensor#structfield.strides).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn strides<T2>(self, value: T2) -> TensorBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            {
                let (v0, v1) = self.0;
                TensorBuilder((v0, v1, value))
            }

            /// Sets the [`strides` field](Tensor#structfield.strides) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn strides_as_null(self) -> TensorBuilder<(T0, T1, ())> {
                self.strides(())
            }
        }

        impl<T0, T1, T2> TensorBuilder<(T0, T1, T2)> {
            /// Setter for the [`offset` field](Tensor#structfield.offset).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn offset<T3>(self, value: T3) -> TensorBuilder<(T0, T1, T2, T3)>
            where
                T3: ::planus::WriteAsDefault<i64, i64>,
            {
                let (v0, v1, v2) = self.0;
                TensorBuilder((v0, v1, v2, value))
            }

            /// Sets the [`offset` field](Tensor#structfield.offset) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn offset_as_default(self) -> TensorBuilder<(T0, T1, T2, ::planus::DefaultValue)> {
                self.offset(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2, T3> TensorBuilder<(T0, T1, T2, T3)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Tensor].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Tensor>
            where
                Self: ::planus::WriteAsOffset<Tensor>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<
                    super::executorch_flatbuffer::ScalarType,
                    super::executorch_flatbuffer::ScalarType,
                >,
            T1: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T3: ::planus::WriteAsDefault<i64, i64>,
        > ::planus::WriteAs<::planus::Offset<Tensor>> for TensorBuilder<(T0, T1, T2, T3)>
        {
            type Prepared = ::planus::Offset<Tensor>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Tensor> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<
                    super::executorch_flatbuffer::ScalarType,
                    super::executorch_flatbuffer::ScalarType,
                >,
            T1: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T3: ::planus::WriteAsDefault<i64, i64>,
        > ::planus::WriteAsOptional<::planus::Offset<Tensor>> for TensorBuilder<(T0, T1, T2, T3)>
        {
            type Prepared = ::planus::Offset<Tensor>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Tensor>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<
                    super::executorch_flatbuffer::ScalarType,
                    super::executorch_flatbuffer::ScalarType,
                >,
            T1: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[i64]>>,
            T3: ::planus::WriteAsDefault<i64, i64>,
        > ::planus::WriteAsOffset<Tensor> for TensorBuilder<(T0, T1, T2, T3)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Tensor> {
                let (v0, v1, v2, v3) = &self.0;
                Tensor::create(builder, v0, v1, v2, v3)
            }
        }

        /// Reference to a deserialized [Tensor].
        #[derive(Copy, Clone)]
        pub struct TensorRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> TensorRef<'a> {
            /// Getter for the [`scalar_type` field](Tensor#structfield.scalar_type).
            #[inline]
            pub fn scalar_type(
                &self,
            ) -> ::planus::Result<super::executorch_flatbuffer::ScalarType> {
                ::core::result::Result::Ok(
                    self.0
                        .access(0, "Tensor", "scalar_type")?
                        .unwrap_or(super::executorch_flatbuffer::ScalarType::Byte),
                )
            }

            /// Getter for the [`sizes` field](Tensor#structfield.sizes).
            #[inline]
            pub fn sizes(
                &self,
            ) -> ::planus::Result<::core::option::Option<::planus::Vector<'a, i64>>> {
                self.0.access(1, "Tensor", "sizes")
            }

            /// Getter for the [`strides` field](Tensor#structfield.strides).
            #[inline]
            pub fn strides(
                &self,
            ) -> ::planus::Result<::core::option::Option<::planus::Vector<'a, i64>>> {
                self.0.access(2, "Tensor", "strides")
            }

            /// Getter for the [`offset` field](Tensor#structfield.offset).
            #[inline]
            pub fn offset(&self) -> ::planus::Result<i64> {
                ::core::result::Result::Ok(self.0.access(3, "Tensor", "offset")?.unwrap_or(0))
            }
        }

        impl<'a> ::core::fmt::Debug for TensorRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("TensorRef");
                f.field("scalar_type", &self.scalar_type());
                if let ::core::option::Option::Some(field_sizes) = self.sizes().transpose() {
                    f.field("sizes", &field_sizes);
                }
                if let ::core::option::Option::Some(field_strides) = self.strides().transpose() {
                    f.field("strides", &field_strides);
                }
                f.field("offset", &self.offset());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<TensorRef<'a>> for Tensor {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: TensorRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    scalar_type: ::core::convert::TryInto::try_into(value.scalar_type()?)?,
                    sizes: if let ::core::option::Option::Some(sizes) = value.sizes()? {
                        ::core::option::Option::Some(sizes.to_vec()?)
                    } else {
                        ::core::option::Option::None
                    },
                    strides: if let ::core::option::Option::Some(strides) = value.strides()? {
                        ::core::option::Option::Some(strides.to_vec()?)
                    } else {
                        ::core::option::Option::None
                    },
                    offset: ::core::convert::TryInto::try_into(value.offset()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for TensorRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for TensorRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[TensorRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Tensor>> for Tensor {
            type Value = ::planus::Offset<Tensor>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Tensor>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for TensorRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[TensorRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Int` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Int` in the file `schema/etdump_schema_flatcc.fbs:19`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct Int {
            /// The field `int_val` in the table `Int`
            pub int_val: i64,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Int {
            fn default() -> Self {
                Self { int_val: 0 }
            }
        }

        impl Int {
            /// Creates a [IntBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> IntBuilder<()> {
                IntBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_int_val: impl ::planus::WriteAsDefault<i64, i64>,
            ) -> ::planus::Offset<Self> {
                let prepared_int_val = field_int_val.prepare(builder, &0);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_int_val.is_some() {
                    table_writer.write_entry::<i64>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_int_val) = prepared_int_val {
                            object_writer.write::<_, _, 8>(&prepared_int_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Int>> for Int {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Int> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Int>> for Int {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Int>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Int> for Int {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Int> {
                Int::create(builder, self.int_val)
            }
        }

        /// Builder for serializing an instance of the [Int] type.
        ///
        /// Can be created using the [Int::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct IntBuilder<State>(State);

        impl IntBuilder<()> {
            /// Setter for the [`int_val` field](Int#structfield.int_val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn int_val<T0>(self, value: T0) -> IntBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<i64, i64>,
            {
                IntBuilder((value,))
            }

            /// Sets the [`int_val` field](Int#structfield.int_val) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn int_val_as_default(self) -> IntBuilder<(::planus::DefaultValue,)> {
                self.int_val(::planus::DefaultValue)
            }
        }

        impl<T0> IntBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Int].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Int>
            where
                Self: ::planus::WriteAsOffset<Int>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<i64, i64>> ::planus::WriteAs<::planus::Offset<Int>>
            for IntBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Int>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Int> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<i64, i64>>
            ::planus::WriteAsOptional<::planus::Offset<Int>> for IntBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Int>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Int>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsDefault<i64, i64>> ::planus::WriteAsOffset<Int> for IntBuilder<(T0,)> {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Int> {
                let (v0,) = &self.0;
                Int::create(builder, v0)
            }
        }

        /// Reference to a deserialized [Int].
        #[derive(Copy, Clone)]
        pub struct IntRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> IntRef<'a> {
            /// Getter for the [`int_val` field](Int#structfield.int_val).
            #[inline]
            pub fn int_val(&self) -> ::planus::Result<i64> {
                ::core::result::Result::Ok(self.0.access(0, "Int", "int_val")?.unwrap_or(0))
            }
        }

        impl<'a> ::core::fmt::Debug for IntRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("IntRef");
                f.field("int_val", &self.int_val());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<IntRef<'a>> for Int {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: IntRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    int_val: ::core::convert::TryInto::try_into(value.int_val()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for IntRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for IntRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[IntRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Int>> for Int {
            type Value = ::planus::Offset<Int>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Int>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for IntRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| error_kind.with_error_location("[IntRef]", "read_as_root", 0))
            }
        }

        /// The table `Bool` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Bool` in the file `schema/etdump_schema_flatcc.fbs:23`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct Bool {
            /// The field `bool_val` in the table `Bool`
            pub bool_val: bool,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Bool {
            fn default() -> Self {
                Self { bool_val: false }
            }
        }

        impl Bool {
            /// Creates a [BoolBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> BoolBuilder<()> {
                BoolBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_bool_val: impl ::planus::WriteAsDefault<bool, bool>,
            ) -> ::planus::Offset<Self> {
                let prepared_bool_val = field_bool_val.prepare(builder, &false);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_bool_val.is_some() {
                    table_writer.write_entry::<bool>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_bool_val) = prepared_bool_val {
                            object_writer.write::<_, _, 1>(&prepared_bool_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Bool>> for Bool {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Bool> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Bool>> for Bool {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Bool>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Bool> for Bool {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Bool> {
                Bool::create(builder, self.bool_val)
            }
        }

        /// Builder for serializing an instance of the [Bool] type.
        ///
        /// Can be created using the [Bool::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct BoolBuilder<State>(State);

        impl BoolBuilder<()> {
            /// Setter for the [`bool_val` field](Bool#structfield.bool_val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bool_val<T0>(self, value: T0) -> BoolBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<bool, bool>,
            {
                BoolBuilder((value,))
            }

            /// Sets the [`bool_val` field](Bool#structfield.bool_val) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bool_val_as_default(self) -> BoolBuilder<(::planus::DefaultValue,)> {
                self.bool_val(::planus::DefaultValue)
            }
        }

        impl<T0> BoolBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Bool].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Bool>
            where
                Self: ::planus::WriteAsOffset<Bool>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<bool, bool>> ::planus::WriteAs<::planus::Offset<Bool>>
            for BoolBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Bool>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Bool> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<bool, bool>>
            ::planus::WriteAsOptional<::planus::Offset<Bool>> for BoolBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Bool>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Bool>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsDefault<bool, bool>> ::planus::WriteAsOffset<Bool>
            for BoolBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Bool> {
                let (v0,) = &self.0;
                Bool::create(builder, v0)
            }
        }

        /// Reference to a deserialized [Bool].
        #[derive(Copy, Clone)]
        pub struct BoolRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> BoolRef<'a> {
            /// Getter for the [`bool_val` field](Bool#structfield.bool_val).
            #[inline]
            pub fn bool_val(&self) -> ::planus::Result<bool> {
                ::core::result::Result::Ok(self.0.access(0, "Bool", "bool_val")?.unwrap_or(false))
            }
        }

        impl<'a> ::core::fmt::Debug for BoolRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("BoolRef");
                f.field("bool_val", &self.bool_val());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<BoolRef<'a>> for Bool {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: BoolRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    bool_val: ::core::convert::TryInto::try_into(value.bool_val()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for BoolRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for BoolRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[BoolRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Bool>> for Bool {
            type Value = ::planus::Offset<Bool>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Bool>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for BoolRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[BoolRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Float` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Float` in the file `schema/etdump_schema_flatcc.fbs:27`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct Float {
            /// The field `float_val` in the table `Float`
            pub float_val: f32,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Float {
            fn default() -> Self {
                Self { float_val: 0.0 }
            }
        }

        impl Float {
            /// Creates a [FloatBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> FloatBuilder<()> {
                FloatBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_float_val: impl ::planus::WriteAsDefault<f32, f32>,
            ) -> ::planus::Offset<Self> {
                let prepared_float_val = field_float_val.prepare(builder, &0.0);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_float_val.is_some() {
                    table_writer.write_entry::<f32>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_float_val) = prepared_float_val
                        {
                            object_writer.write::<_, _, 4>(&prepared_float_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Float>> for Float {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Float> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Float>> for Float {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Float>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Float> for Float {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Float> {
                Float::create(builder, self.float_val)
            }
        }

        /// Builder for serializing an instance of the [Float] type.
        ///
        /// Can be created using the [Float::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct FloatBuilder<State>(State);

        impl FloatBuilder<()> {
            /// Setter for the [`float_val` field](Float#structfield.float_val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn float_val<T0>(self, value: T0) -> FloatBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<f32, f32>,
            {
                FloatBuilder((value,))
            }

            /// Sets the [`float_val` field](Float#structfield.float_val) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn float_val_as_default(self) -> FloatBuilder<(::planus::DefaultValue,)> {
                self.float_val(::planus::DefaultValue)
            }
        }

        impl<T0> FloatBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Float].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Float>
            where
                Self: ::planus::WriteAsOffset<Float>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<f32, f32>> ::planus::WriteAs<::planus::Offset<Float>>
            for FloatBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Float>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Float> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<f32, f32>>
            ::planus::WriteAsOptional<::planus::Offset<Float>> for FloatBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Float>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Float>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsDefault<f32, f32>> ::planus::WriteAsOffset<Float>
            for FloatBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Float> {
                let (v0,) = &self.0;
                Float::create(builder, v0)
            }
        }

        /// Reference to a deserialized [Float].
        #[derive(Copy, Clone)]
        pub struct FloatRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> FloatRef<'a> {
            /// Getter for the [`float_val` field](Float#structfield.float_val).
            #[inline]
            pub fn float_val(&self) -> ::planus::Result<f32> {
                ::core::result::Result::Ok(self.0.access(0, "Float", "float_val")?.unwrap_or(0.0))
            }
        }

        impl<'a> ::core::fmt::Debug for FloatRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("FloatRef");
                f.field("float_val", &self.float_val());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<FloatRef<'a>> for Float {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: FloatRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    float_val: ::core::convert::TryInto::try_into(value.float_val()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for FloatRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for FloatRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[FloatRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Float>> for Float {
            type Value = ::planus::Offset<Float>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Float>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for FloatRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[FloatRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Double` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Double` in the file `schema/etdump_schema_flatcc.fbs:31`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct Double {
            /// The field `double_val` in the table `Double`
            pub double_val: f64,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Double {
            fn default() -> Self {
                Self { double_val: 0.0 }
            }
        }

        impl Double {
            /// Creates a [DoubleBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> DoubleBuilder<()> {
                DoubleBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_double_val: impl ::planus::WriteAsDefault<f64, f64>,
            ) -> ::planus::Offset<Self> {
                let prepared_double_val = field_double_val.prepare(builder, &0.0);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_double_val.is_some() {
                    table_writer.write_entry::<f64>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_double_val) =
                            prepared_double_val
                        {
                            object_writer.write::<_, _, 8>(&prepared_double_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Double>> for Double {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Double> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Double>> for Double {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Double>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Double> for Double {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Double> {
                Double::create(builder, self.double_val)
            }
        }

        /// Builder for serializing an instance of the [Double] type.
        ///
        /// Can be created using the [Double::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct DoubleBuilder<State>(State);

        impl DoubleBuilder<()> {
            /// Setter for the [`double_val` field](Double#structfield.double_val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn double_val<T0>(self, value: T0) -> DoubleBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<f64, f64>,
            {
                DoubleBuilder((value,))
            }

            /// Sets the [`double_val` field](Double#structfield.double_val) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn double_val_as_default(self) -> DoubleBuilder<(::planus::DefaultValue,)> {
                self.double_val(::planus::DefaultValue)
            }
        }

        impl<T0> DoubleBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Double].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Double>
            where
                Self: ::planus::WriteAsOffset<Double>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<f64, f64>> ::planus::WriteAs<::planus::Offset<Double>>
            for DoubleBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Double>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Double> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<f64, f64>>
            ::planus::WriteAsOptional<::planus::Offset<Double>> for DoubleBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Double>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Double>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsDefault<f64, f64>> ::planus::WriteAsOffset<Double>
            for DoubleBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Double> {
                let (v0,) = &self.0;
                Double::create(builder, v0)
            }
        }

        /// Reference to a deserialized [Double].
        #[derive(Copy, Clone)]
        pub struct DoubleRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> DoubleRef<'a> {
            /// Getter for the [`double_val` field](Double#structfield.double_val).
            #[inline]
            pub fn double_val(&self) -> ::planus::Result<f64> {
                ::core::result::Result::Ok(self.0.access(0, "Double", "double_val")?.unwrap_or(0.0))
            }
        }

        impl<'a> ::core::fmt::Debug for DoubleRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("DoubleRef");
                f.field("double_val", &self.double_val());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<DoubleRef<'a>> for Double {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: DoubleRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    double_val: ::core::convert::TryInto::try_into(value.double_val()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for DoubleRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for DoubleRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[DoubleRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Double>> for Double {
            type Value = ::planus::Offset<Double>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Double>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for DoubleRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[DoubleRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `String` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `String` in the file `schema/etdump_schema_flatcc.fbs:35`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct String {
            /// The field `string_val` in the table `String`
            pub string_val: ::core::option::Option<::planus::alloc::string::String>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for String {
            fn default() -> Self {
                Self {
                    string_val: ::core::default::Default::default(),
                }
            }
        }

        impl String {
            /// Creates a [StringBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> StringBuilder<()> {
                StringBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_string_val: impl ::planus::WriteAsOptional<
                    ::planus::Offset<::core::primitive::str>,
                >,
            ) -> ::planus::Offset<Self> {
                let prepared_string_val = field_string_val.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_string_val.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_string_val) =
                            prepared_string_val
                        {
                            object_writer.write::<_, _, 4>(&prepared_string_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<String>> for String {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<String> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<String>> for String {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<String>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<String> for String {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<String> {
                String::create(builder, &self.string_val)
            }
        }

        /// Builder for serializing an instance of the [String] type.
        ///
        /// Can be created using the [String::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct StringBuilder<State>(State);

        impl StringBuilder<()> {
            /// Setter for the [`string_val` field](String#structfield.string_val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn string_val<T0>(self, value: T0) -> StringBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                StringBuilder((value,))
            }

            /// Sets the [`string_val` field](String#structfield.string_val) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn string_val_as_null(self) -> StringBuilder<((),)> {
                self.string_val(())
            }
        }

        impl<T0> StringBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [String].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<String>
            where
                Self: ::planus::WriteAsOffset<String>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAs<::planus::Offset<String>> for StringBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<String>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<String> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAsOptional<::planus::Offset<String>> for StringBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<String>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<String>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAsOffset<String> for StringBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<String> {
                let (v0,) = &self.0;
                String::create(builder, v0)
            }
        }

        /// Reference to a deserialized [String].
        #[derive(Copy, Clone)]
        pub struct StringRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> StringRef<'a> {
            /// Getter for the [`string_val` field](String#structfield.string_val).
            #[inline]
            pub fn string_val(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(0, "String", "string_val")
            }
        }

        impl<'a> ::core::fmt::Debug for StringRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("StringRef");
                if let ::core::option::Option::Some(field_string_val) =
                    self.string_val().transpose()
                {
                    f.field("string_val", &field_string_val);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<StringRef<'a>> for String {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: StringRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    string_val: value.string_val()?.map(::core::convert::Into::into),
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for StringRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for StringRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[StringRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<String>> for String {
            type Value = ::planus::Offset<String>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<String>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for StringRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[StringRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `TensorList` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `TensorList` in the file `schema/etdump_schema_flatcc.fbs:39`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct TensorList {
            /// The field `tensors` in the table `TensorList`
            pub tensors: ::core::option::Option<::planus::alloc::vec::Vec<self::Tensor>>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for TensorList {
            fn default() -> Self {
                Self {
                    tensors: ::core::default::Default::default(),
                }
            }
        }

        impl TensorList {
            /// Creates a [TensorListBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> TensorListBuilder<()> {
                TensorListBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_tensors: impl ::planus::WriteAsOptional<
                    ::planus::Offset<[::planus::Offset<self::Tensor>]>,
                >,
            ) -> ::planus::Offset<Self> {
                let prepared_tensors = field_tensors.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_tensors.is_some() {
                    table_writer
                        .write_entry::<::planus::Offset<[::planus::Offset<self::Tensor>]>>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_tensors) = prepared_tensors {
                            object_writer.write::<_, _, 4>(&prepared_tensors);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<TensorList>> for TensorList {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<TensorList> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<TensorList>> for TensorList {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<TensorList>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<TensorList> for TensorList {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<TensorList> {
                TensorList::create(builder, &self.tensors)
            }
        }

        /// Builder for serializing an instance of the [TensorList] type.
        ///
        /// Can be created using the [TensorList::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct TensorListBuilder<State>(State);

        impl TensorListBuilder<()> {
            /// Setter for the [`tensors` field](TensorList#structfield.tensors).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensors<T0>(self, value: T0) -> TensorListBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Tensor>]>>,
            {
                TensorListBuilder((value,))
            }

            /// Sets the [`tensors` field](TensorList#structfield.tensors) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensors_as_null(self) -> TensorListBuilder<((),)> {
                self.tensors(())
            }
        }

        impl<T0> TensorListBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [TensorList].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<TensorList>
            where
                Self: ::planus::WriteAsOffset<TensorList>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Tensor>]>>>
            ::planus::WriteAs<::planus::Offset<TensorList>> for TensorListBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<TensorList>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<TensorList> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Tensor>]>>>
            ::planus::WriteAsOptional<::planus::Offset<TensorList>> for TensorListBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<TensorList>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<TensorList>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Tensor>]>>>
            ::planus::WriteAsOffset<TensorList> for TensorListBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<TensorList> {
                let (v0,) = &self.0;
                TensorList::create(builder, v0)
            }
        }

        /// Reference to a deserialized [TensorList].
        #[derive(Copy, Clone)]
        pub struct TensorListRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> TensorListRef<'a> {
            /// Getter for the [`tensors` field](TensorList#structfield.tensors).
            #[inline]
            pub fn tensors(
                &self,
            ) -> ::planus::Result<
                ::core::option::Option<::planus::Vector<'a, ::planus::Result<self::TensorRef<'a>>>>,
            > {
                self.0.access(0, "TensorList", "tensors")
            }
        }

        impl<'a> ::core::fmt::Debug for TensorListRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("TensorListRef");
                if let ::core::option::Option::Some(field_tensors) = self.tensors().transpose() {
                    f.field("tensors", &field_tensors);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<TensorListRef<'a>> for TensorList {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: TensorListRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    tensors: if let ::core::option::Option::Some(tensors) = value.tensors()? {
                        ::core::option::Option::Some(tensors.to_vec_result()?)
                    } else {
                        ::core::option::Option::None
                    },
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for TensorListRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for TensorListRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location(
                        "[TensorListRef]",
                        "get",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<TensorList>> for TensorList {
            type Value = ::planus::Offset<TensorList>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<TensorList>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for TensorListRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[TensorListRef]", "read_as_root", 0)
                })
            }
        }

        /// The enum `ValueType` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Enum `ValueType` in the file `schema/etdump_schema_flatcc.fbs:43`
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(i8)]
        pub enum ValueType {
            /// The variant `Null` in the enum `ValueType`
            Null = 0,

            /// The variant `Int` in the enum `ValueType`
            Int = 1,

            /// The variant `Bool` in the enum `ValueType`
            Bool = 2,

            /// The variant `Float` in the enum `ValueType`
            Float = 3,

            /// The variant `Double` in the enum `ValueType`
            Double = 4,

            /// The variant `Tensor` in the enum `ValueType`
            Tensor = 5,

            /// The variant `TensorList` in the enum `ValueType`
            TensorList = 6,

            /// The variant `String` in the enum `ValueType`
            String = 7,
        }

        impl ValueType {
            /// Array containing all valid variants of ValueType
            pub const ENUM_VALUES: [Self; 8] = [
                Self::Null,
                Self::Int,
                Self::Bool,
                Self::Float,
                Self::Double,
                Self::Tensor,
                Self::TensorList,
                Self::String,
            ];
        }

        impl ::core::convert::TryFrom<i8> for ValueType {
            type Error = ::planus::errors::UnknownEnumTagKind;
            #[inline]
            fn try_from(
                value: i8,
            ) -> ::core::result::Result<Self, ::planus::errors::UnknownEnumTagKind> {
                #[allow(clippy::match_single_binding)]
                match value {
                    0 => ::core::result::Result::Ok(ValueType::Null),
                    1 => ::core::result::Result::Ok(ValueType::Int),
                    2 => ::core::result::Result::Ok(ValueType::Bool),
                    3 => ::core::result::Result::Ok(ValueType::Float),
                    4 => ::core::result::Result::Ok(ValueType::Double),
                    5 => ::core::result::Result::Ok(ValueType::Tensor),
                    6 => ::core::result::Result::Ok(ValueType::TensorList),
                    7 => ::core::result::Result::Ok(ValueType::String),

                    _ => ::core::result::Result::Err(::planus::errors::UnknownEnumTagKind {
                        tag: value as i128,
                    }),
                }
            }
        }

        impl ::core::convert::From<ValueType> for i8 {
            #[inline]
            fn from(value: ValueType) -> Self {
                value as i8
            }
        }

        /// # Safety
        /// The Planus compiler correctly calculates `ALIGNMENT` and `SIZE`.
        unsafe impl ::planus::Primitive for ValueType {
            const ALIGNMENT: usize = 1;
            const SIZE: usize = 1;
        }

        impl ::planus::WriteAsPrimitive<ValueType> for ValueType {
            #[inline]
            fn write<const N: usize>(&self, cursor: ::planus::Cursor<'_, N>, buffer_position: u32) {
                (*self as i8).write(cursor, buffer_position);
            }
        }

        impl ::planus::WriteAs<ValueType> for ValueType {
            type Prepared = Self;

            #[inline]
            fn prepare(&self, _builder: &mut ::planus::Builder) -> ValueType {
                *self
            }
        }

        impl ::planus::WriteAsDefault<ValueType, ValueType> for ValueType {
            type Prepared = Self;

            #[inline]
            fn prepare(
                &self,
                _builder: &mut ::planus::Builder,
                default: &ValueType,
            ) -> ::core::option::Option<ValueType> {
                if self == default {
                    ::core::option::Option::None
                } else {
                    ::core::option::Option::Some(*self)
                }
            }
        }

        impl ::planus::WriteAsOptional<ValueType> for ValueType {
            type Prepared = Self;

            #[inline]
            fn prepare(
                &self,
                _builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<ValueType> {
                ::core::option::Option::Some(*self)
            }
        }

        impl<'buf> ::planus::TableRead<'buf> for ValueType {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'buf>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                let n: i8 = ::planus::TableRead::from_buffer(buffer, offset)?;
                ::core::result::Result::Ok(::core::convert::TryInto::try_into(n)?)
            }
        }

        impl<'buf> ::planus::VectorReadInner<'buf> for ValueType {
            type Error = ::planus::errors::UnknownEnumTag;
            const STRIDE: usize = 1;
            #[inline]
            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'buf>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::UnknownEnumTag> {
                let value = unsafe { *buffer.buffer.get_unchecked(offset) as i8 };
                let value: ::core::result::Result<Self, _> =
                    ::core::convert::TryInto::try_into(value);
                value.map_err(|error_kind| {
                    error_kind.with_error_location(
                        "ValueType",
                        "VectorRead::from_buffer",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<ValueType> for ValueType {
            const STRIDE: usize = 1;

            type Value = Self;

            #[inline]
            fn prepare(&self, _builder: &mut ::planus::Builder) -> Self {
                *self
            }

            #[inline]
            unsafe fn write_values(
                values: &[Self],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 1];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - i as u32,
                    );
                }
            }
        }

        /// The table `Value` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Value` in the file `schema/etdump_schema_flatcc.fbs:47`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct Value {
            /// The field `val` in the table `Value`
            pub val: self::ValueType,
            /// The field `tensor` in the table `Value`
            pub tensor: ::core::option::Option<::planus::alloc::boxed::Box<self::Tensor>>,
            /// The field `tensor_list` in the table `Value`
            pub tensor_list: ::core::option::Option<::planus::alloc::boxed::Box<self::TensorList>>,
            /// The field `int_value` in the table `Value`
            pub int_value: ::core::option::Option<::planus::alloc::boxed::Box<self::Int>>,
            /// The field `float_value` in the table `Value`
            pub float_value: ::core::option::Option<::planus::alloc::boxed::Box<self::Float>>,
            /// The field `double_value` in the table `Value`
            pub double_value: ::core::option::Option<::planus::alloc::boxed::Box<self::Double>>,
            /// The field `bool_value` in the table `Value`
            pub bool_value: ::core::option::Option<::planus::alloc::boxed::Box<self::Bool>>,
            /// The field `output` in the table `Value`
            pub output: ::core::option::Option<::planus::alloc::boxed::Box<self::Bool>>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Value {
            fn default() -> Self {
                Self {
                    val: self::ValueType::Null,
                    tensor: ::core::default::Default::default(),
                    tensor_list: ::core::default::Default::default(),
                    int_value: ::core::default::Default::default(),
                    float_value: ::core::default::Default::default(),
                    double_value: ::core::default::Default::default(),
                    bool_value: ::core::default::Default::default(),
                    output: ::core::default::Default::default(),
                }
            }
        }

        impl Value {
            /// Creates a [ValueBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> ValueBuilder<()> {
                ValueBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_val: impl ::planus::WriteAsDefault<self::ValueType, self::ValueType>,
                field_tensor: impl ::planus::WriteAsOptional<::planus::Offset<self::Tensor>>,
                field_tensor_list: impl ::planus::WriteAsOptional<::planus::Offset<self::TensorList>>,
                field_int_value: impl ::planus::WriteAsOptional<::planus::Offset<self::Int>>,
                field_float_value: impl ::planus::WriteAsOptional<::planus::Offset<self::Float>>,
                field_double_value: impl ::planus::WriteAsOptional<::planus::Offset<self::Double>>,
                field_bool_value: impl ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
                field_output: impl ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            ) -> ::planus::Offset<Self> {
                let prepared_val = field_val.prepare(builder, &self::ValueType::Null);
                let prepared_tensor = field_tensor.prepare(builder);
                let prepared_tensor_list = field_tensor_list.prepare(builder);
                let prepared_int_value = field_int_value.prepare(builder);
                let prepared_float_value = field_float_value.prepare(builder);
                let prepared_double_value = field_double_value.prepare(builder);
                let prepared_bool_value = field_bool_value.prepare(builder);
                let prepared_output = field_output.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<20> =
                    ::core::default::Default::default();
                if prepared_tensor.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Tensor>>(1);
                }
                if prepared_tensor_list.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::TensorList>>(2);
                }
                if prepared_int_value.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Int>>(3);
                }
                if prepared_float_value.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Float>>(4);
                }
                if prepared_double_value.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Double>>(5);
                }
                if prepared_bool_value.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Bool>>(6);
                }
                if prepared_output.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Bool>>(7);
                }
                if prepared_val.is_some() {
                    table_writer.write_entry::<self::ValueType>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_tensor) = prepared_tensor {
                            object_writer.write::<_, _, 4>(&prepared_tensor);
                        }
                        if let ::core::option::Option::Some(prepared_tensor_list) =
                            prepared_tensor_list
                        {
                            object_writer.write::<_, _, 4>(&prepared_tensor_list);
                        }
                        if let ::core::option::Option::Some(prepared_int_value) = prepared_int_value
                        {
                            object_writer.write::<_, _, 4>(&prepared_int_value);
                        }
                        if let ::core::option::Option::Some(prepared_float_value) =
                            prepared_float_value
                        {
                            object_writer.write::<_, _, 4>(&prepared_float_value);
                        }
                        if let ::core::option::Option::Some(prepared_double_value) =
                            prepared_double_value
                        {
                            object_writer.write::<_, _, 4>(&prepared_double_value);
                        }
                        if let ::core::option::Option::Some(prepared_bool_value) =
                            prepared_bool_value
                        {
                            object_writer.write::<_, _, 4>(&prepared_bool_value);
                        }
                        if let ::core::option::Option::Some(prepared_output) = prepared_output {
                            object_writer.write::<_, _, 4>(&prepared_output);
                        }
                        if let ::core::option::Option::Some(prepared_val) = prepared_val {
                            object_writer.write::<_, _, 1>(&prepared_val);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Value>> for Value {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Value> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Value>> for Value {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Value>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Value> for Value {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Value> {
                Value::create(
                    builder,
                    self.val,
                    &self.tensor,
                    &self.tensor_list,
                    &self.int_value,
                    &self.float_value,
                    &self.double_value,
                    &self.bool_value,
                    &self.output,
                )
            }
        }

        /// Builder for serializing an instance of the [Value] type.
        ///
        /// Can be created using the [Value::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct ValueBuilder<State>(State);

        impl ValueBuilder<()> {
            /// Setter for the [`val` field](Value#structfield.val).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn val<T0>(self, value: T0) -> ValueBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<self::ValueType, self::ValueType>,
            {
                ValueBuilder((value,))
            }

            /// Sets the [`val` field](Value#structfield.val) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn val_as_default(self) -> ValueBuilder<(::planus::DefaultValue,)> {
                self.val(::planus::DefaultValue)
            }
        }

        impl<T0> ValueBuilder<(T0,)> {
            /// Setter for the [`tensor` field](Value#structfield.tensor).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensor<T1>(self, value: T1) -> ValueBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsOptional<::planus::Offset<self::Tensor>>,
            {
                let (v0,) = self.0;
                ValueBuilder((v0, value))
            }

            /// Sets the [`tensor` field](Value#structfield.tensor) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensor_as_null(self) -> ValueBuilder<(T0, ())> {
                self.tensor(())
            }
        }

        impl<T0, T1> ValueBuilder<(T0, T1)> {
            /// Setter for the [`tensor_list` field](Value#structfield.tensor_list).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensor_list<T2>(self, value: T2) -> ValueBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsOptional<::planus::Offset<self::TensorList>>,
            {
                let (v0, v1) = self.0;
                ValueBuilder((v0, v1, value))
            }

            /// Sets the [`tensor_list` field](Value#structfield.tensor_list) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn tensor_list_as_null(self) -> ValueBuilder<(T0, T1, ())> {
                self.tensor_list(())
            }
        }

        impl<T0, T1, T2> ValueBuilder<(T0, T1, T2)> {
            /// Setter for the [`int_value` field](Value#structfield.int_value).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn int_value<T3>(self, value: T3) -> ValueBuilder<(T0, T1, T2, T3)>
            where
                T3: ::planus::WriteAsOptional<::planus::Offset<self::Int>>,
            {
                let (v0, v1, v2) = self.0;
                ValueBuilder((v0, v1, v2, value))
            }

            /// Sets the [`int_value` field](Value#structfield.int_value) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn int_value_as_null(self) -> ValueBuilder<(T0, T1, T2, ())> {
                self.int_value(())
            }
        }

        impl<T0, T1, T2, T3> ValueBuilder<(T0, T1, T2, T3)> {
            /// Setter for the [`float_value` field](Value#structfield.float_value).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn float_value<T4>(self, value: T4) -> ValueBuilder<(T0, T1, T2, T3, T4)>
            where
                T4: ::planus::WriteAsOptional<::planus::Offset<self::Float>>,
            {
                let (v0, v1, v2, v3) = self.0;
                ValueBuilder((v0, v1, v2, v3, value))
            }

            /// Sets the [`float_value` field](Value#structfield.float_value) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn float_value_as_null(self) -> ValueBuilder<(T0, T1, T2, T3, ())> {
                self.float_value(())
            }
        }

        impl<T0, T1, T2, T3, T4> ValueBuilder<(T0, T1, T2, T3, T4)> {
            /// Setter for the [`double_value` field](Value#structfield.double_value).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn double_value<T5>(self, value: T5) -> ValueBuilder<(T0, T1, T2, T3, T4, T5)>
            where
                T5: ::planus::WriteAsOptional<::planus::Offset<self::Double>>,
            {
                let (v0, v1, v2, v3, v4) = self.0;
                ValueBuilder((v0, v1, v2, v3, v4, value))
            }

            /// Sets the [`double_value` field](Value#structfield.double_value) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn double_value_as_null(self) -> ValueBuilder<(T0, T1, T2, T3, T4, ())> {
                self.double_value(())
            }
        }

        impl<T0, T1, T2, T3, T4, T5> ValueBuilder<(T0, T1, T2, T3, T4, T5)> {
            /// Setter for the [`bool_value` field](Value#structfield.bool_value).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bool_value<T6>(self, value: T6) -> ValueBuilder<(T0, T1, T2, T3, T4, T5, T6)>
            where
                T6: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            {
                let (v0, v1, v2, v3, v4, v5) = self.0;
                ValueBuilder((v0, v1, v2, v3, v4, v5, value))
            }

            /// Sets the [`bool_value` field](Value#structfield.bool_value) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bool_value_as_null(self) -> ValueBuilder<(T0, T1, T2, T3, T4, T5, ())> {
                self.bool_value(())
            }
        }

        impl<T0, T1, T2, T3, T4, T5, T6> ValueBuilder<(T0, T1, T2, T3, T4, T5, T6)> {
            /// Setter for the [`output` field](Value#structfield.output).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn output<T7>(self, value: T7) -> ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
            where
                T7: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            {
                let (v0, v1, v2, v3, v4, v5, v6) = self.0;
                ValueBuilder((v0, v1, v2, v3, v4, v5, v6, value))
            }

            /// Sets the [`output` field](Value#structfield.output) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn output_as_null(self) -> ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, ())> {
                self.output(())
            }
        }

        impl<T0, T1, T2, T3, T4, T5, T6, T7> ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Value].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Value>
            where
                Self: ::planus::WriteAsOffset<Value>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<self::ValueType, self::ValueType>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::Tensor>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::TensorList>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<self::Int>>,
            T4: ::planus::WriteAsOptional<::planus::Offset<self::Float>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<self::Double>>,
            T6: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            T7: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
        > ::planus::WriteAs<::planus::Offset<Value>>
            for ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            type Prepared = ::planus::Offset<Value>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Value> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<self::ValueType, self::ValueType>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::Tensor>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::TensorList>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<self::Int>>,
            T4: ::planus::WriteAsOptional<::planus::Offset<self::Float>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<self::Double>>,
            T6: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            T7: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
        > ::planus::WriteAsOptional<::planus::Offset<Value>>
            for ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            type Prepared = ::planus::Offset<Value>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Value>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<self::ValueType, self::ValueType>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::Tensor>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::TensorList>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<self::Int>>,
            T4: ::planus::WriteAsOptional<::planus::Offset<self::Float>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<self::Double>>,
            T6: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
            T7: ::planus::WriteAsOptional<::planus::Offset<self::Bool>>,
        > ::planus::WriteAsOffset<Value> for ValueBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Value> {
                let (v0, v1, v2, v3, v4, v5, v6, v7) = &self.0;
                Value::create(builder, v0, v1, v2, v3, v4, v5, v6, v7)
            }
        }

        /// Reference to a deserialized [Value].
        #[derive(Copy, Clone)]
        pub struct ValueRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> ValueRef<'a> {
            /// Getter for the [`val` field](Value#structfield.val).
            #[inline]
            pub fn val(&self) -> ::planus::Result<self::ValueType> {
                ::core::result::Result::Ok(
                    self.0
                        .access(0, "Value", "val")?
                        .unwrap_or(self::ValueType::Null),
                )
            }

            /// Getter for the [`tensor` field](Value#structfield.tensor).
            #[inline]
            pub fn tensor(&self) -> ::planus::Result<::core::option::Option<self::TensorRef<'a>>> {
                self.0.access(1, "Value", "tensor")
            }

            /// Getter for the [`tensor_list` field](Value#structfield.tensor_list).
            #[inline]
            pub fn tensor_list(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::TensorListRef<'a>>> {
                self.0.access(2, "Value", "tensor_list")
            }

            /// Getter for the [`int_value` field](Value#structfield.int_value).
            #[inline]
            pub fn int_value(&self) -> ::planus::Result<::core::option::Option<self::IntRef<'a>>> {
                self.0.access(3, "Value", "int_value")
            }

            /// Getter for the [`float_value` field](Value#structfield.float_value).
            #[inline]
            pub fn float_value(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::FloatRef<'a>>> {
                self.0.access(4, "Value", "float_value")
            }

            /// Getter for the [`double_value` field](Value#structfield.double_value).
            #[inline]
            pub fn double_value(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::DoubleRef<'a>>> {
                self.0.access(5, "Value", "double_value")
            }

            /// Getter for the [`bool_value` field](Value#structfield.bool_value).
            #[inline]
            pub fn bool_value(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::BoolRef<'a>>> {
                self.0.access(6, "Value", "bool_value")
            }

            /// Getter for the [`output` field](Value#structfield.output).
            #[inline]
            pub fn output(&self) -> ::planus::Result<::core::option::Option<self::BoolRef<'a>>> {
                self.0.access(7, "Value", "output")
            }
        }

        impl<'a> ::core::fmt::Debug for ValueRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("ValueRef");
                f.field("val", &self.val());
                if let ::core::option::Option::Some(field_tensor) = self.tensor().transpose() {
                    f.field("tensor", &field_tensor);
                }
                if let ::core::option::Option::Some(field_tensor_list) =
                    self.tensor_list().transpose()
                {
                    f.field("tensor_list", &field_tensor_list);
                }
                if let ::core::option::Option::Some(field_int_value) = self.int_value().transpose()
                {
                    f.field("int_value", &field_int_value);
                }
                if let ::core::option::Option::Some(field_float_value) =
                    self.float_value().transpose()
                {
                    f.field("float_value", &field_float_value);
                }
                if let ::core::option::Option::Some(field_double_value) =
                    self.double_value().transpose()
                {
                    f.field("double_value", &field_double_value);
                }
                if let ::core::option::Option::Some(field_bool_value) =
                    self.bool_value().transpose()
                {
                    f.field("bool_value", &field_bool_value);
                }
                if let ::core::option::Option::Some(field_output) = self.output().transpose() {
                    f.field("output", &field_output);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<ValueRef<'a>> for Value {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: ValueRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    val: ::core::convert::TryInto::try_into(value.val()?)?,
                    tensor: if let ::core::option::Option::Some(tensor) = value.tensor()? {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(tensor)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    tensor_list: if let ::core::option::Option::Some(tensor_list) =
                        value.tensor_list()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(tensor_list)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    int_value: if let ::core::option::Option::Some(int_value) = value.int_value()? {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(int_value)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    float_value: if let ::core::option::Option::Some(float_value) =
                        value.float_value()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(float_value)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    double_value: if let ::core::option::Option::Some(double_value) =
                        value.double_value()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(double_value)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    bool_value: if let ::core::option::Option::Some(bool_value) =
                        value.bool_value()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(bool_value)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    output: if let ::core::option::Option::Some(output) = value.output()? {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(output)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for ValueRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for ValueRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[ValueRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Value>> for Value {
            type Value = ::planus::Offset<Value>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Value>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for ValueRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[ValueRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `DebugEvent` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `DebugEvent` in the file `schema/etdump_schema_flatcc.fbs:60`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct DebugEvent {
            /// The field `chain_index` in the table `DebugEvent`
            pub chain_index: u64,
            /// The field `instruction_id` in the table `DebugEvent`
            pub instruction_id: i32,
            /// The field `debug_entry` in the table `DebugEvent`
            pub debug_entry: ::core::option::Option<::planus::alloc::boxed::Box<self::Value>>,
            /// The field `delegate_debug_id_int` in the table `DebugEvent`
            pub delegate_debug_id_int: i32,
            /// The field `delegate_debug_id_str` in the table `DebugEvent`
            pub delegate_debug_id_str: ::core::option::Option<::planus::alloc::string::String>,
            /// The field `name` in the table `DebugEvent`
            pub name: ::core::option::Option<::planus::alloc::string::String>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for DebugEvent {
            fn default() -> Self {
                Self {
                    chain_index: 0,
                    instruction_id: -1,
                    debug_entry: ::core::default::Default::default(),
                    delegate_debug_id_int: -1,
                    delegate_debug_id_str: ::core::default::Default::default(),
                    name: ::core::default::Default::default(),
                }
            }
        }

        impl DebugEvent {
            /// Creates a [DebugEventBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> DebugEventBuilder<()> {
                DebugEventBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_chain_index: impl ::planus::WriteAsDefault<u64, u64>,
                field_instruction_id: impl ::planus::WriteAsDefault<i32, i32>,
                field_debug_entry: impl ::planus::WriteAsOptional<::planus::Offset<self::Value>>,
                field_delegate_debug_id_int: impl ::planus::WriteAsDefault<i32, i32>,
                field_delegate_debug_id_str: impl ::planus::WriteAsOptional<
                    ::planus::Offset<::core::primitive::str>,
                >,
                field_name: impl ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            ) -> ::planus::Offset<Self> {
                let prepared_chain_index = field_chain_index.prepare(builder, &0);
                let prepared_instruction_id = field_instruction_id.prepare(builder, &-1);
                let prepared_debug_entry = field_debug_entry.prepare(builder);
                let prepared_delegate_debug_id_int =
                    field_delegate_debug_id_int.prepare(builder, &-1);
                let prepared_delegate_debug_id_str = field_delegate_debug_id_str.prepare(builder);
                let prepared_name = field_name.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<16> =
                    ::core::default::Default::default();
                if prepared_chain_index.is_some() {
                    table_writer.write_entry::<u64>(0);
                }
                if prepared_instruction_id.is_some() {
                    table_writer.write_entry::<i32>(1);
                }
                if prepared_debug_entry.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::Value>>(2);
                }
                if prepared_delegate_debug_id_int.is_some() {
                    table_writer.write_entry::<i32>(3);
                }
                if prepared_delegate_debug_id_str.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(4);
                }
                if prepared_name.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(5);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_chain_index) =
                            prepared_chain_index
                        {
                            object_writer.write::<_, _, 8>(&prepared_chain_index);
                        }
                        if let ::core::option::Option::Some(prepared_instruction_id) =
                            prepared_instruction_id
                        {
                            object_writer.write::<_, _, 4>(&prepared_instruction_id);
                        }
                        if let ::core::option::Option::Some(prepared_debug_entry) =
                            prepared_debug_entry
                        {
                            object_writer.write::<_, _, 4>(&prepared_debug_entry);
                        }
                        if let ::core::option::Option::Some(prepared_delegate_debug_id_int) =
                            prepared_delegate_debug_id_int
                        {
                            object_writer.write::<_, _, 4>(&prepared_delegate_debug_id_int);
                        }
                        if let ::core::option::Option::Some(prepared_delegate_debug_id_str) =
                            prepared_delegate_debug_id_str
                        {
                            object_writer.write::<_, _, 4>(&prepared_delegate_debug_id_str);
                        }
                        if let ::core::option::Option::Some(prepared_name) = prepared_name {
                            object_writer.write::<_, _, 4>(&prepared_name);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<DebugEvent>> for DebugEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<DebugEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<DebugEvent>> for DebugEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<DebugEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<DebugEvent> for DebugEvent {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<DebugEvent> {
                DebugEvent::create(
                    builder,
                    self.chain_index,
                    self.instruction_id,
                    &self.debug_entry,
                    self.delegate_debug_id_int,
                    &self.delegate_debug_id_str,
                    &self.name,
                )
            }
        }

        /// Builder for serializing an instance of the [DebugEvent] type.
        ///
        /// Can be created using the [DebugEvent::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct DebugEventBuilder<State>(State);

        impl DebugEventBuilder<()> {
            /// Setter for the [`chain_index` field](DebugEvent#structfield.chain_index).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn chain_index<T0>(self, value: T0) -> DebugEventBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<u64, u64>,
            {
                DebugEventBuilder((value,))
            }

            /// Sets the [`chain_index` field](DebugEvent#structfield.chain_index) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn chain_index_as_default(self) -> DebugEventBuilder<(::planus::DefaultValue,)> {
                self.chain_index(::planus::DefaultValue)
            }
        }

        impl<T0> DebugEventBuilder<(T0,)> {
            /// Setter for the [`instruction_id` field](DebugEvent#structfield.instruction_id).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn instruction_id<T1>(self, value: T1) -> DebugEventBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0,) = self.0;
                DebugEventBuilder((v0, value))
            }

            /// Sets the [`instruction_id` field](DebugEvent#structfield.instruction_id) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn instruction_id_as_default(
                self,
            ) -> DebugEventBuilder<(T0, ::planus::DefaultValue)> {
                self.instruction_id(::planus::DefaultValue)
            }
        }

        impl<T0, T1> DebugEventBuilder<(T0, T1)> {
            /// Setter for the [`debug_entry` field](DebugEvent#structfield.debug_entry).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn debug_entry<T2>(self, value: T2) -> DebugEventBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsOptional<::planus::Offset<self::Value>>,
            {
                let (v0, v1) = self.0;
                DebugEventBuilder((v0, v1, value))
            }

            /// Sets the [`debug_entry` field](DebugEvent#structfield.debug_entry) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn debug_entry_as_null(self) -> DebugEventBuilder<(T0, T1, ())> {
                self.debug_entry(())
            }
        }

        impl<T0, T1, T2> DebugEventBuilder<(T0, T1, T2)> {
            /// Setter for the [`delegate_debug_id_int` field](DebugEvent#structfield.delegate_debug_id_int).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_int<T3>(self, value: T3) -> DebugEventBuilder<(T0, T1, T2, T3)>
            where
                T3: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0, v1, v2) = self.0;
                DebugEventBuilder((v0, v1, v2, value))
            }

            /// Sets the [`delegate_debug_id_int` field](DebugEvent#structfield.delegate_debug_id_int) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_int_as_default(
                self,
            ) -> DebugEventBuilder<(T0, T1, T2, ::planus::DefaultValue)> {
                self.delegate_debug_id_int(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2, T3> DebugEventBuilder<(T0, T1, T2, T3)> {
            /// Setter for the [`delegate_debug_id_str` field](DebugEvent#structfield.delegate_debug_id_str).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_str<T4>(
                self,
                value: T4,
            ) -> DebugEventBuilder<(T0, T1, T2, T3, T4)>
            where
                T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                let (v0, v1, v2, v3) = self.0;
                DebugEventBuilder((v0, v1, v2, v3, value))
            }

            /// Sets the [`delegate_debug_id_str` field](DebugEvent#structfield.delegate_debug_id_str) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_str_as_null(self) -> DebugEventBuilder<(T0, T1, T2, T3, ())> {
                self.delegate_debug_id_str(())
            }
        }

        impl<T0, T1, T2, T3, T4> DebugEventBuilder<(T0, T1, T2, T3, T4)> {
            /// Setter for the [`name` field](DebugEvent#structfield.name).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name<T5>(self, value: T5) -> DebugEventBuilder<(T0, T1, T2, T3, T4, T5)>
            where
                T5: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                let (v0, v1, v2, v3, v4) = self.0;
                DebugEventBuilder((v0, v1, v2, v3, v4, value))
            }

            /// Sets the [`name` field](DebugEvent#structfield.name) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name_as_null(self) -> DebugEventBuilder<(T0, T1, T2, T3, T4, ())> {
                self.name(())
            }
        }

        impl<T0, T1, T2, T3, T4, T5> DebugEventBuilder<(T0, T1, T2, T3, T4, T5)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [DebugEvent].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<DebugEvent>
            where
                Self: ::planus::WriteAsOffset<DebugEvent>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u64, u64>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::Value>>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
        > ::planus::WriteAs<::planus::Offset<DebugEvent>>
            for DebugEventBuilder<(T0, T1, T2, T3, T4, T5)>
        {
            type Prepared = ::planus::Offset<DebugEvent>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<DebugEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u64, u64>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::Value>>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
        > ::planus::WriteAsOptional<::planus::Offset<DebugEvent>>
            for DebugEventBuilder<(T0, T1, T2, T3, T4, T5)>
        {
            type Prepared = ::planus::Offset<DebugEvent>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<DebugEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u64, u64>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::Value>>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
        > ::planus::WriteAsOffset<DebugEvent> for DebugEventBuilder<(T0, T1, T2, T3, T4, T5)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<DebugEvent> {
                let (v0, v1, v2, v3, v4, v5) = &self.0;
                DebugEvent::create(builder, v0, v1, v2, v3, v4, v5)
            }
        }

        /// Reference to a deserialized [DebugEvent].
        #[derive(Copy, Clone)]
        pub struct DebugEventRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> DebugEventRef<'a> {
            /// Getter for the [`chain_index` field](DebugEvent#structfield.chain_index).
            #[inline]
            pub fn chain_index(&self) -> ::planus::Result<u64> {
                ::core::result::Result::Ok(
                    self.0.access(0, "DebugEvent", "chain_index")?.unwrap_or(0),
                )
            }

            /// Getter for the [`instruction_id` field](DebugEvent#structfield.instruction_id).
            #[inline]
            pub fn instruction_id(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(1, "DebugEvent", "instruction_id")?
                        .unwrap_or(-1),
                )
            }

            /// Getter for the [`debug_entry` field](DebugEvent#structfield.debug_entry).
            #[inline]
            pub fn debug_entry(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::ValueRef<'a>>> {
                self.0.access(2, "DebugEvent", "debug_entry")
            }

            /// Getter for the [`delegate_debug_id_int` field](DebugEvent#structfield.delegate_debug_id_int).
            #[inline]
            pub fn delegate_debug_id_int(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(3, "DebugEvent", "delegate_debug_id_int")?
                        .unwrap_or(-1),
                )
            }

            /// Getter for the [`delegate_debug_id_str` field](DebugEvent#structfield.delegate_debug_id_str).
            #[inline]
            pub fn delegate_debug_id_str(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(4, "DebugEvent", "delegate_debug_id_str")
            }

            /// Getter for the [`name` field](DebugEvent#structfield.name).
            #[inline]
            pub fn name(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(5, "DebugEvent", "name")
            }
        }

        impl<'a> ::core::fmt::Debug for DebugEventRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("DebugEventRef");
                f.field("chain_index", &self.chain_index());
                f.field("instruction_id", &self.instruction_id());
                if let ::core::option::Option::Some(field_debug_entry) =
                    self.debug_entry().transpose()
                {
                    f.field("debug_entry", &field_debug_entry);
                }
                f.field("delegate_debug_id_int", &self.delegate_debug_id_int());
                if let ::core::option::Option::Some(field_delegate_debug_id_str) =
                    self.delegate_debug_id_str().transpose()
                {
                    f.field("delegate_debug_id_str", &field_delegate_debug_id_str);
                }
                if let ::core::option::Option::Some(field_name) = self.name().transpose() {
                    f.field("name", &field_name);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<DebugEventRef<'a>> for DebugEvent {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: DebugEventRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    chain_index: ::core::convert::TryInto::try_into(value.chain_index()?)?,
                    instruction_id: ::core::convert::TryInto::try_into(value.instruction_id()?)?,
                    debug_entry: if let ::core::option::Option::Some(debug_entry) =
                        value.debug_entry()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(debug_entry)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    delegate_debug_id_int: ::core::convert::TryInto::try_into(
                        value.delegate_debug_id_int()?,
                    )?,
                    delegate_debug_id_str: value
                        .delegate_debug_id_str()?
                        .map(::core::convert::Into::into),
                    name: value.name()?.map(::core::convert::Into::into),
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for DebugEventRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for DebugEventRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location(
                        "[DebugEventRef]",
                        "get",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<DebugEvent>> for DebugEvent {
            type Value = ::planus::Offset<DebugEvent>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<DebugEvent>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for DebugEventRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[DebugEventRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `AllocationEvent` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `AllocationEvent` in the file `schema/etdump_schema_flatcc.fbs:89`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct AllocationEvent {
            /// The field `allocator_id` in the table `AllocationEvent`
            pub allocator_id: i32,
            /// The field `allocation_size` in the table `AllocationEvent`
            pub allocation_size: u64,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for AllocationEvent {
            fn default() -> Self {
                Self {
                    allocator_id: 0,
                    allocation_size: 0,
                }
            }
        }

        impl AllocationEvent {
            /// Creates a [AllocationEventBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> AllocationEventBuilder<()> {
                AllocationEventBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_allocator_id: impl ::planus::WriteAsDefault<i32, i32>,
                field_allocation_size: impl ::planus::WriteAsDefault<u64, u64>,
            ) -> ::planus::Offset<Self> {
                let prepared_allocator_id = field_allocator_id.prepare(builder, &0);
                let prepared_allocation_size = field_allocation_size.prepare(builder, &0);

                let mut table_writer: ::planus::table_writer::TableWriter<8> =
                    ::core::default::Default::default();
                if prepared_allocation_size.is_some() {
                    table_writer.write_entry::<u64>(1);
                }
                if prepared_allocator_id.is_some() {
                    table_writer.write_entry::<i32>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_allocation_size) =
                            prepared_allocation_size
                        {
                            object_writer.write::<_, _, 8>(&prepared_allocation_size);
                        }
                        if let ::core::option::Option::Some(prepared_allocator_id) =
                            prepared_allocator_id
                        {
                            object_writer.write::<_, _, 4>(&prepared_allocator_id);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<AllocationEvent>> for AllocationEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::planus::Offset<AllocationEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<AllocationEvent>> for AllocationEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<AllocationEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<AllocationEvent> for AllocationEvent {
            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::planus::Offset<AllocationEvent> {
                AllocationEvent::create(builder, self.allocator_id, self.allocation_size)
            }
        }

        /// Builder for serializing an instance of the [AllocationEvent] type.
        ///
        /// Can be created using the [AllocationEvent::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct AllocationEventBuilder<State>(State);

        impl AllocationEventBuilder<()> {
            /// Setter for the [`allocator_id` field](AllocationEvent#structfield.allocator_id).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocator_id<T0>(self, value: T0) -> AllocationEventBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<i32, i32>,
            {
                AllocationEventBuilder((value,))
            }

            /// Sets the [`allocator_id` field](AllocationEvent#structfield.allocator_id) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocator_id_as_default(
                self,
            ) -> AllocationEventBuilder<(::planus::DefaultValue,)> {
                self.allocator_id(::planus::DefaultValue)
            }
        }

        impl<T0> AllocationEventBuilder<(T0,)> {
            /// Setter for the [`allocation_size` field](AllocationEvent#structfield.allocation_size).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocation_size<T1>(self, value: T1) -> AllocationEventBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsDefault<u64, u64>,
            {
                let (v0,) = self.0;
                AllocationEventBuilder((v0, value))
            }

            /// Sets the [`allocation_size` field](AllocationEvent#structfield.allocation_size) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocation_size_as_default(
                self,
            ) -> AllocationEventBuilder<(T0, ::planus::DefaultValue)> {
                self.allocation_size(::planus::DefaultValue)
            }
        }

        impl<T0, T1> AllocationEventBuilder<(T0, T1)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [AllocationEvent].
            #[inline]
            pub fn finish(
                self,
                builder: &mut ::planus::Builder,
            ) -> ::planus::Offset<AllocationEvent>
            where
                Self: ::planus::WriteAsOffset<AllocationEvent>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<i32, i32>, T1: ::planus::WriteAsDefault<u64, u64>>
            ::planus::WriteAs<::planus::Offset<AllocationEvent>>
            for AllocationEventBuilder<(T0, T1)>
        {
            type Prepared = ::planus::Offset<AllocationEvent>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::planus::Offset<AllocationEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsDefault<i32, i32>, T1: ::planus::WriteAsDefault<u64, u64>>
            ::planus::WriteAsOptional<::planus::Offset<AllocationEvent>>
            for AllocationEventBuilder<(T0, T1)>
        {
            type Prepared = ::planus::Offset<AllocationEvent>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<AllocationEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsDefault<i32, i32>, T1: ::planus::WriteAsDefault<u64, u64>>
            ::planus::WriteAsOffset<AllocationEvent> for AllocationEventBuilder<(T0, T1)>
        {
            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::planus::Offset<AllocationEvent> {
                let (v0, v1) = &self.0;
                AllocationEvent::create(builder, v0, v1)
            }
        }

        /// Reference to a deserialized [AllocationEvent].
        #[derive(Copy, Clone)]
        pub struct AllocationEventRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> AllocationEventRef<'a> {
            /// Getter for the [`allocator_id` field](AllocationEvent#structfield.allocator_id).
            #[inline]
            pub fn allocator_id(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(0, "AllocationEvent", "allocator_id")?
                        .unwrap_or(0),
                )
            }

            /// Getter for the [`allocation_size` field](AllocationEvent#structfield.allocation_size).
            #[inline]
            pub fn allocation_size(&self) -> ::planus::Result<u64> {
                ::core::result::Result::Ok(
                    self.0
                        .access(1, "AllocationEvent", "allocation_size")?
                        .unwrap_or(0),
                )
            }
        }

        impl<'a> ::core::fmt::Debug for AllocationEventRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("AllocationEventRef");
                f.field("allocator_id", &self.allocator_id());
                f.field("allocation_size", &self.allocation_size());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<AllocationEventRef<'a>> for AllocationEvent {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: AllocationEventRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    allocator_id: ::core::convert::TryInto::try_into(value.allocator_id()?)?,
                    allocation_size: ::core::convert::TryInto::try_into(value.allocation_size()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for AllocationEventRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for AllocationEventRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location(
                        "[AllocationEventRef]",
                        "get",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<AllocationEvent>> for AllocationEvent {
            type Value = ::planus::Offset<AllocationEvent>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<AllocationEvent>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for AllocationEventRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[AllocationEventRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `ProfileEvent` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `ProfileEvent` in the file `schema/etdump_schema_flatcc.fbs:100`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct ProfileEvent {
            /// The field `name` in the table `ProfileEvent`
            pub name: ::core::option::Option<::planus::alloc::string::String>,
            /// The field `chain_index` in the table `ProfileEvent`
            pub chain_index: i32,
            /// The field `instruction_id` in the table `ProfileEvent`
            pub instruction_id: i32,
            /// The field `delegate_debug_id_int` in the table `ProfileEvent`
            pub delegate_debug_id_int: i32,
            /// The field `delegate_debug_id_str` in the table `ProfileEvent`
            pub delegate_debug_id_str: ::core::option::Option<::planus::alloc::string::String>,
            /// The field `delegate_debug_metadata` in the table `ProfileEvent`
            pub delegate_debug_metadata: ::core::option::Option<::planus::alloc::vec::Vec<u8>>,
            /// The field `start_time` in the table `ProfileEvent`
            pub start_time: u64,
            /// The field `end_time` in the table `ProfileEvent`
            pub end_time: u64,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for ProfileEvent {
            fn default() -> Self {
                Self {
                    name: ::core::default::Default::default(),
                    chain_index: 0,
                    instruction_id: -1,
                    delegate_debug_id_int: -1,
                    delegate_debug_id_str: ::core::default::Default::default(),
                    delegate_debug_metadata: ::core::default::Default::default(),
                    start_time: 0,
                    end_time: 0,
                }
            }
        }

        impl ProfileEvent {
            /// Creates a [ProfileEventBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> ProfileEventBuilder<()> {
                ProfileEventBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_name: impl ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
                field_chain_index: impl ::planus::WriteAsDefault<i32, i32>,
                field_instruction_id: impl ::planus::WriteAsDefault<i32, i32>,
                field_delegate_debug_id_int: impl ::planus::WriteAsDefault<i32, i32>,
                field_delegate_debug_id_str: impl ::planus::WriteAsOptional<
                    ::planus::Offset<::core::primitive::str>,
                >,
                field_delegate_debug_metadata: impl ::planus::WriteAsOptional<::planus::Offset<[u8]>>,
                field_start_time: impl ::planus::WriteAsDefault<u64, u64>,
                field_end_time: impl ::planus::WriteAsDefault<u64, u64>,
            ) -> ::planus::Offset<Self> {
                let prepared_name = field_name.prepare(builder);
                let prepared_chain_index = field_chain_index.prepare(builder, &0);
                let prepared_instruction_id = field_instruction_id.prepare(builder, &-1);
                let prepared_delegate_debug_id_int =
                    field_delegate_debug_id_int.prepare(builder, &-1);
                let prepared_delegate_debug_id_str = field_delegate_debug_id_str.prepare(builder);
                let prepared_delegate_debug_metadata =
                    field_delegate_debug_metadata.prepare(builder);
                let prepared_start_time = field_start_time.prepare(builder, &0);
                let prepared_end_time = field_end_time.prepare(builder, &0);

                let mut table_writer: ::planus::table_writer::TableWriter<20> =
                    ::core::default::Default::default();
                if prepared_start_time.is_some() {
                    table_writer.write_entry::<u64>(6);
                }
                if prepared_end_time.is_some() {
                    table_writer.write_entry::<u64>(7);
                }
                if prepared_name.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(0);
                }
                if prepared_chain_index.is_some() {
                    table_writer.write_entry::<i32>(1);
                }
                if prepared_instruction_id.is_some() {
                    table_writer.write_entry::<i32>(2);
                }
                if prepared_delegate_debug_id_int.is_some() {
                    table_writer.write_entry::<i32>(3);
                }
                if prepared_delegate_debug_id_str.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(4);
                }
                if prepared_delegate_debug_metadata.is_some() {
                    table_writer.write_entry::<::planus::Offset<[u8]>>(5);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_start_time) =
                            prepared_start_time
                        {
                            object_writer.write::<_, _, 8>(&prepared_start_time);
                        }
                        if let ::core::option::Option::Some(prepared_end_time) = prepared_end_time {
                            object_writer.write::<_, _, 8>(&prepared_end_time);
                        }
                        if let ::core::option::Option::Some(prepared_name) = prepared_name {
                            object_writer.write::<_, _, 4>(&prepared_name);
                        }
                        if let ::core::option::Option::Some(prepared_chain_index) =
                            prepared_chain_index
                        {
                            object_writer.write::<_, _, 4>(&prepared_chain_index);
                        }
                        if let ::core::option::Option::Some(prepared_instruction_id) =
                            prepared_instruction_id
                        {
                            object_writer.write::<_, _, 4>(&prepared_instruction_id);
                        }
                        if let ::core::option::Option::Some(prepared_delegate_debug_id_int) =
                            prepared_delegate_debug_id_int
                        {
                            object_writer.write::<_, _, 4>(&prepared_delegate_debug_id_int);
                        }
                        if let ::core::option::Option::Some(prepared_delegate_debug_id_str) =
                            prepared_delegate_debug_id_str
                        {
                            object_writer.write::<_, _, 4>(&prepared_delegate_debug_id_str);
                        }
                        if let ::core::option::Option::Some(prepared_delegate_debug_metadata) =
                            prepared_delegate_debug_metadata
                        {
                            object_writer.write::<_, _, 4>(&prepared_delegate_debug_metadata);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<ProfileEvent>> for ProfileEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<ProfileEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<ProfileEvent>> for ProfileEvent {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<ProfileEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<ProfileEvent> for ProfileEvent {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<ProfileEvent> {
                ProfileEvent::create(
                    builder,
                    &self.name,
                    self.chain_index,
                    self.instruction_id,
                    self.delegate_debug_id_int,
                    &self.delegate_debug_id_str,
                    &self.delegate_debug_metadata,
                    self.start_time,
                    self.end_time,
                )
            }
        }

        /// Builder for serializing an instance of the [ProfileEvent] type.
        ///
        /// Can be created using the [ProfileEvent::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct ProfileEventBuilder<State>(State);

        impl ProfileEventBuilder<()> {
            /// Setter for the [`name` field](ProfileEvent#structfield.name).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name<T0>(self, value: T0) -> ProfileEventBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                ProfileEventBuilder((value,))
            }

            /// Sets the [`name` field](ProfileEvent#structfield.name) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name_as_null(self) -> ProfileEventBuilder<((),)> {
                self.name(())
            }
        }

        impl<T0> ProfileEventBuilder<(T0,)> {
            /// Setter for the [`chain_index` field](ProfileEvent#structfield.chain_index).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn chain_index<T1>(self, value: T1) -> ProfileEventBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0,) = self.0;
                ProfileEventBuilder((v0, value))
            }

            /// Sets the [`chain_index` field](ProfileEvent#structfield.chain_index) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn chain_index_as_default(
                self,
            ) -> ProfileEventBuilder<(T0, ::planus::DefaultValue)> {
                self.chain_index(::planus::DefaultValue)
            }
        }

        impl<T0, T1> ProfileEventBuilder<(T0, T1)> {
            /// Setter for the [`instruction_id` field](ProfileEvent#structfield.instruction_id).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn instruction_id<T2>(self, value: T2) -> ProfileEventBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0, v1) = self.0;
                ProfileEventBuilder((v0, v1, value))
            }

            /// Sets the [`instruction_id` field](ProfileEvent#structfield.instruction_id) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn instruction_id_as_default(
                self,
            ) -> ProfileEventBuilder<(T0, T1, ::planus::DefaultValue)> {
                self.instruction_id(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2> ProfileEventBuilder<(T0, T1, T2)> {
            /// Setter for the [`delegate_debug_id_int` field](ProfileEvent#structfield.delegate_debug_id_int).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_int<T3>(
                self,
                value: T3,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3)>
            where
                T3: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0, v1, v2) = self.0;
                ProfileEventBuilder((v0, v1, v2, value))
            }

            /// Sets the [`delegate_debug_id_int` field](ProfileEvent#structfield.delegate_debug_id_int) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_int_as_default(
                self,
            ) -> ProfileEventBuilder<(T0, T1, T2, ::planus::DefaultValue)> {
                self.delegate_debug_id_int(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2, T3> ProfileEventBuilder<(T0, T1, T2, T3)> {
            /// Setter for the [`delegate_debug_id_str` field](ProfileEvent#structfield.delegate_debug_id_str).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_str<T4>(
                self,
                value: T4,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4)>
            where
                T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                let (v0, v1, v2, v3) = self.0;
                ProfileEventBuilder((v0, v1, v2, v3, value))
            }

            /// Sets the [`delegate_debug_id_str` field](ProfileEvent#structfield.delegate_debug_id_str) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_id_str_as_null(
                self,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, ())> {
                self.delegate_debug_id_str(())
            }
        }

        impl<T0, T1, T2, T3, T4> ProfileEventBuilder<(T0, T1, T2, T3, T4)> {
            /// Setter for the [`delegate_debug_metadata` field](ProfileEvent#structfield.delegate_debug_metadata).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_metadata<T5>(
                self,
                value: T5,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5)>
            where
                T5: ::planus::WriteAsOptional<::planus::Offset<[u8]>>,
            {
                let (v0, v1, v2, v3, v4) = self.0;
                ProfileEventBuilder((v0, v1, v2, v3, v4, value))
            }

            /// Sets the [`delegate_debug_metadata` field](ProfileEvent#structfield.delegate_debug_metadata) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn delegate_debug_metadata_as_null(
                self,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, ())> {
                self.delegate_debug_metadata(())
            }
        }

        impl<T0, T1, T2, T3, T4, T5> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5)> {
            /// Setter for the [`start_time` field](ProfileEvent#structfield.start_time).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn start_time<T6>(
                self,
                value: T6,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6)>
            where
                T6: ::planus::WriteAsDefault<u64, u64>,
            {
                let (v0, v1, v2, v3, v4, v5) = self.0;
                ProfileEventBuilder((v0, v1, v2, v3, v4, v5, value))
            }

            /// Sets the [`start_time` field](ProfileEvent#structfield.start_time) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn start_time_as_default(
                self,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, ::planus::DefaultValue)> {
                self.start_time(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2, T3, T4, T5, T6> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6)> {
            /// Setter for the [`end_time` field](ProfileEvent#structfield.end_time).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn end_time<T7>(
                self,
                value: T7,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
            where
                T7: ::planus::WriteAsDefault<u64, u64>,
            {
                let (v0, v1, v2, v3, v4, v5, v6) = self.0;
                ProfileEventBuilder((v0, v1, v2, v3, v4, v5, v6, value))
            }

            /// Sets the [`end_time` field](ProfileEvent#structfield.end_time) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn end_time_as_default(
                self,
            ) -> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, ::planus::DefaultValue)>
            {
                self.end_time(::planus::DefaultValue)
            }
        }

        impl<T0, T1, T2, T3, T4, T5, T6, T7> ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [ProfileEvent].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<ProfileEvent>
            where
                Self: ::planus::WriteAsOffset<ProfileEvent>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsDefault<i32, i32>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<[u8]>>,
            T6: ::planus::WriteAsDefault<u64, u64>,
            T7: ::planus::WriteAsDefault<u64, u64>,
        > ::planus::WriteAs<::planus::Offset<ProfileEvent>>
            for ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            type Prepared = ::planus::Offset<ProfileEvent>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<ProfileEvent> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsDefault<i32, i32>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<[u8]>>,
            T6: ::planus::WriteAsDefault<u64, u64>,
            T7: ::planus::WriteAsDefault<u64, u64>,
        > ::planus::WriteAsOptional<::planus::Offset<ProfileEvent>>
            for ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            type Prepared = ::planus::Offset<ProfileEvent>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<ProfileEvent>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsDefault<i32, i32>,
            T3: ::planus::WriteAsDefault<i32, i32>,
            T4: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T5: ::planus::WriteAsOptional<::planus::Offset<[u8]>>,
            T6: ::planus::WriteAsDefault<u64, u64>,
            T7: ::planus::WriteAsDefault<u64, u64>,
        > ::planus::WriteAsOffset<ProfileEvent>
            for ProfileEventBuilder<(T0, T1, T2, T3, T4, T5, T6, T7)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<ProfileEvent> {
                let (v0, v1, v2, v3, v4, v5, v6, v7) = &self.0;
                ProfileEvent::create(builder, v0, v1, v2, v3, v4, v5, v6, v7)
            }
        }

        /// Reference to a deserialized [ProfileEvent].
        #[derive(Copy, Clone)]
        pub struct ProfileEventRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> ProfileEventRef<'a> {
            /// Getter for the [`name` field](ProfileEvent#structfield.name).
            #[inline]
            pub fn name(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(0, "ProfileEvent", "name")
            }

            /// Getter for the [`chain_index` field](ProfileEvent#structfield.chain_index).
            #[inline]
            pub fn chain_index(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(1, "ProfileEvent", "chain_index")?
                        .unwrap_or(0),
                )
            }

            /// Getter for the [`instruction_id` field](ProfileEvent#structfield.instruction_id).
            #[inline]
            pub fn instruction_id(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(2, "ProfileEvent", "instruction_id")?
                        .unwrap_or(-1),
                )
            }

            /// Getter for the [`delegate_debug_id_int` field](ProfileEvent#structfield.delegate_debug_id_int).
            #[inline]
            pub fn delegate_debug_id_int(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(3, "ProfileEvent", "delegate_debug_id_int")?
                        .unwrap_or(-1),
                )
            }

            /// Getter for the [`delegate_debug_id_str` field](ProfileEvent#structfield.delegate_debug_id_str).
            #[inline]
            pub fn delegate_debug_id_str(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(4, "ProfileEvent", "delegate_debug_id_str")
            }

            /// Getter for the [`delegate_debug_metadata` field](ProfileEvent#structfield.delegate_debug_metadata).
            #[inline]
            pub fn delegate_debug_metadata(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a [u8]>> {
                self.0.access(5, "ProfileEvent", "delegate_debug_metadata")
            }

            /// Getter for the [`start_time` field](ProfileEvent#structfield.start_time).
            #[inline]
            pub fn start_time(&self) -> ::planus::Result<u64> {
                ::core::result::Result::Ok(
                    self.0.access(6, "ProfileEvent", "start_time")?.unwrap_or(0),
                )
            }

            /// Getter for the [`end_time` field](ProfileEvent#structfield.end_time).
            #[inline]
            pub fn end_time(&self) -> ::planus::Result<u64> {
                ::core::result::Result::Ok(
                    self.0.access(7, "ProfileEvent", "end_time")?.unwrap_or(0),
                )
            }
        }

        impl<'a> ::core::fmt::Debug for ProfileEventRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("ProfileEventRef");
                if let ::core::option::Option::Some(field_name) = self.name().transpose() {
                    f.field("name", &field_name);
                }
                f.field("chain_index", &self.chain_index());
                f.field("instruction_id", &self.instruction_id());
                f.field("delegate_debug_id_int", &self.delegate_debug_id_int());
                if let ::core::option::Option::Some(field_delegate_debug_id_str) =
                    self.delegate_debug_id_str().transpose()
                {
                    f.field("delegate_debug_id_str", &field_delegate_debug_id_str);
                }
                if let ::core::option::Option::Some(field_delegate_debug_metadata) =
                    self.delegate_debug_metadata().transpose()
                {
                    f.field("delegate_debug_metadata", &field_delegate_debug_metadata);
                }
                f.field("start_time", &self.start_time());
                f.field("end_time", &self.end_time());
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<ProfileEventRef<'a>> for ProfileEvent {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: ProfileEventRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    name: value.name()?.map(::core::convert::Into::into),
                    chain_index: ::core::convert::TryInto::try_into(value.chain_index()?)?,
                    instruction_id: ::core::convert::TryInto::try_into(value.instruction_id()?)?,
                    delegate_debug_id_int: ::core::convert::TryInto::try_into(
                        value.delegate_debug_id_int()?,
                    )?,
                    delegate_debug_id_str: value
                        .delegate_debug_id_str()?
                        .map(::core::convert::Into::into),
                    delegate_debug_metadata: value.delegate_debug_metadata()?.map(|v| v.to_vec()),
                    start_time: ::core::convert::TryInto::try_into(value.start_time()?)?,
                    end_time: ::core::convert::TryInto::try_into(value.end_time()?)?,
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for ProfileEventRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for ProfileEventRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location(
                        "[ProfileEventRef]",
                        "get",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<ProfileEvent>> for ProfileEvent {
            type Value = ::planus::Offset<ProfileEvent>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<ProfileEvent>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for ProfileEventRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[ProfileEventRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Event` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Event` in the file `schema/etdump_schema_flatcc.fbs:140`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct Event {
            /// The field `profile_event` in the table `Event`
            pub profile_event:
                ::core::option::Option<::planus::alloc::boxed::Box<self::ProfileEvent>>,
            /// The field `allocation_event` in the table `Event`
            pub allocation_event:
                ::core::option::Option<::planus::alloc::boxed::Box<self::AllocationEvent>>,
            /// The field `debug_event` in the table `Event`
            pub debug_event: ::core::option::Option<::planus::alloc::boxed::Box<self::DebugEvent>>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Event {
            fn default() -> Self {
                Self {
                    profile_event: ::core::default::Default::default(),
                    allocation_event: ::core::default::Default::default(),
                    debug_event: ::core::default::Default::default(),
                }
            }
        }

        impl Event {
            /// Creates a [EventBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> EventBuilder<()> {
                EventBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_profile_event: impl ::planus::WriteAsOptional<
                    ::planus::Offset<self::ProfileEvent>,
                >,
                field_allocation_event: impl ::planus::WriteAsOptional<
                    ::planus::Offset<self::AllocationEvent>,
                >,
                field_debug_event: impl ::planus::WriteAsOptional<::planus::Offset<self::DebugEvent>>,
            ) -> ::planus::Offset<Self> {
                let prepared_profile_event = field_profile_event.prepare(builder);
                let prepared_allocation_event = field_allocation_event.prepare(builder);
                let prepared_debug_event = field_debug_event.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<10> =
                    ::core::default::Default::default();
                if prepared_profile_event.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::ProfileEvent>>(0);
                }
                if prepared_allocation_event.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::AllocationEvent>>(1);
                }
                if prepared_debug_event.is_some() {
                    table_writer.write_entry::<::planus::Offset<self::DebugEvent>>(2);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_profile_event) =
                            prepared_profile_event
                        {
                            object_writer.write::<_, _, 4>(&prepared_profile_event);
                        }
                        if let ::core::option::Option::Some(prepared_allocation_event) =
                            prepared_allocation_event
                        {
                            object_writer.write::<_, _, 4>(&prepared_allocation_event);
                        }
                        if let ::core::option::Option::Some(prepared_debug_event) =
                            prepared_debug_event
                        {
                            object_writer.write::<_, _, 4>(&prepared_debug_event);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Event>> for Event {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Event> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Event>> for Event {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Event>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Event> for Event {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Event> {
                Event::create(
                    builder,
                    &self.profile_event,
                    &self.allocation_event,
                    &self.debug_event,
                )
            }
        }

        /// Builder for serializing an instance of the [Event] type.
        ///
        /// Can be created using the [Event::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct EventBuilder<State>(State);

        impl EventBuilder<()> {
            /// Setter for the [`profile_event` field](Event#structfield.profile_event).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn profile_event<T0>(self, value: T0) -> EventBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<self::ProfileEvent>>,
            {
                EventBuilder((value,))
            }

            /// Sets the [`profile_event` field](Event#structfield.profile_event) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn profile_event_as_null(self) -> EventBuilder<((),)> {
                self.profile_event(())
            }
        }

        impl<T0> EventBuilder<(T0,)> {
            /// Setter for the [`allocation_event` field](Event#structfield.allocation_event).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocation_event<T1>(self, value: T1) -> EventBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsOptional<::planus::Offset<self::AllocationEvent>>,
            {
                let (v0,) = self.0;
                EventBuilder((v0, value))
            }

            /// Sets the [`allocation_event` field](Event#structfield.allocation_event) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocation_event_as_null(self) -> EventBuilder<(T0, ())> {
                self.allocation_event(())
            }
        }

        impl<T0, T1> EventBuilder<(T0, T1)> {
            /// Setter for the [`debug_event` field](Event#structfield.debug_event).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn debug_event<T2>(self, value: T2) -> EventBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsOptional<::planus::Offset<self::DebugEvent>>,
            {
                let (v0, v1) = self.0;
                EventBuilder((v0, v1, value))
            }

            /// Sets the [`debug_event` field](Event#structfield.debug_event) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn debug_event_as_null(self) -> EventBuilder<(T0, T1, ())> {
                self.debug_event(())
            }
        }

        impl<T0, T1, T2> EventBuilder<(T0, T1, T2)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Event].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Event>
            where
                Self: ::planus::WriteAsOffset<Event>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<self::ProfileEvent>>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::AllocationEvent>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::DebugEvent>>,
        > ::planus::WriteAs<::planus::Offset<Event>> for EventBuilder<(T0, T1, T2)>
        {
            type Prepared = ::planus::Offset<Event>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Event> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<self::ProfileEvent>>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::AllocationEvent>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::DebugEvent>>,
        > ::planus::WriteAsOptional<::planus::Offset<Event>> for EventBuilder<(T0, T1, T2)>
        {
            type Prepared = ::planus::Offset<Event>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Event>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<self::ProfileEvent>>,
            T1: ::planus::WriteAsOptional<::planus::Offset<self::AllocationEvent>>,
            T2: ::planus::WriteAsOptional<::planus::Offset<self::DebugEvent>>,
        > ::planus::WriteAsOffset<Event> for EventBuilder<(T0, T1, T2)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Event> {
                let (v0, v1, v2) = &self.0;
                Event::create(builder, v0, v1, v2)
            }
        }

        /// Reference to a deserialized [Event].
        #[derive(Copy, Clone)]
        pub struct EventRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> EventRef<'a> {
            /// Getter for the [`profile_event` field](Event#structfield.profile_event).
            #[inline]
            pub fn profile_event(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::ProfileEventRef<'a>>> {
                self.0.access(0, "Event", "profile_event")
            }

            /// Getter for the [`allocation_event` field](Event#structfield.allocation_event).
            #[inline]
            pub fn allocation_event(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::AllocationEventRef<'a>>>
            {
                self.0.access(1, "Event", "allocation_event")
            }

            /// Getter for the [`debug_event` field](Event#structfield.debug_event).
            #[inline]
            pub fn debug_event(
                &self,
            ) -> ::planus::Result<::core::option::Option<self::DebugEventRef<'a>>> {
                self.0.access(2, "Event", "debug_event")
            }
        }

        impl<'a> ::core::fmt::Debug for EventRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("EventRef");
                if let ::core::option::Option::Some(field_profile_event) =
                    self.profile_event().transpose()
                {
                    f.field("profile_event", &field_profile_event);
                }
                if let ::core::option::Option::Some(field_allocation_event) =
                    self.allocation_event().transpose()
                {
                    f.field("allocation_event", &field_allocation_event);
                }
                if let ::core::option::Option::Some(field_debug_event) =
                    self.debug_event().transpose()
                {
                    f.field("debug_event", &field_debug_event);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<EventRef<'a>> for Event {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: EventRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    profile_event: if let ::core::option::Option::Some(profile_event) =
                        value.profile_event()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(profile_event)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    allocation_event: if let ::core::option::Option::Some(allocation_event) =
                        value.allocation_event()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(allocation_event)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                    debug_event: if let ::core::option::Option::Some(debug_event) =
                        value.debug_event()?
                    {
                        ::core::option::Option::Some(::planus::alloc::boxed::Box::new(
                            ::core::convert::TryInto::try_into(debug_event)?,
                        ))
                    } else {
                        ::core::option::Option::None
                    },
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for EventRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for EventRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[EventRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Event>> for Event {
            type Value = ::planus::Offset<Event>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Event>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for EventRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[EventRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `Allocator` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `Allocator` in the file `schema/etdump_schema_flatcc.fbs:149`
        #[derive(Clone, Debug, PartialEq, PartialOrd, Eq, Ord, Hash)]
        pub struct Allocator {
            /// The field `name` in the table `Allocator`
            pub name: ::core::option::Option<::planus::alloc::string::String>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for Allocator {
            fn default() -> Self {
                Self {
                    name: ::core::default::Default::default(),
                }
            }
        }

        impl Allocator {
            /// Creates a [AllocatorBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> AllocatorBuilder<()> {
                AllocatorBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_name: impl ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            ) -> ::planus::Offset<Self> {
                let prepared_name = field_name.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<6> =
                    ::core::default::Default::default();
                if prepared_name.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(0);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_name) = prepared_name {
                            object_writer.write::<_, _, 4>(&prepared_name);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<Allocator>> for Allocator {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Allocator> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<Allocator>> for Allocator {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Allocator>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<Allocator> for Allocator {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Allocator> {
                Allocator::create(builder, &self.name)
            }
        }

        /// Builder for serializing an instance of the [Allocator] type.
        ///
        /// Can be created using the [Allocator::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct AllocatorBuilder<State>(State);

        impl AllocatorBuilder<()> {
            /// Setter for the [`name` field](Allocator#structfield.name).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name<T0>(self, value: T0) -> AllocatorBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                AllocatorBuilder((value,))
            }

            /// Sets the [`name` field](Allocator#structfield.name) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name_as_null(self) -> AllocatorBuilder<((),)> {
                self.name(())
            }
        }

        impl<T0> AllocatorBuilder<(T0,)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [Allocator].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<Allocator>
            where
                Self: ::planus::WriteAsOffset<Allocator>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAs<::planus::Offset<Allocator>> for AllocatorBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Allocator>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Allocator> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAsOptional<::planus::Offset<Allocator>> for AllocatorBuilder<(T0,)>
        {
            type Prepared = ::planus::Offset<Allocator>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<Allocator>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>>
            ::planus::WriteAsOffset<Allocator> for AllocatorBuilder<(T0,)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<Allocator> {
                let (v0,) = &self.0;
                Allocator::create(builder, v0)
            }
        }

        /// Reference to a deserialized [Allocator].
        #[derive(Copy, Clone)]
        pub struct AllocatorRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> AllocatorRef<'a> {
            /// Getter for the [`name` field](Allocator#structfield.name).
            #[inline]
            pub fn name(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(0, "Allocator", "name")
            }
        }

        impl<'a> ::core::fmt::Debug for AllocatorRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("AllocatorRef");
                if let ::core::option::Option::Some(field_name) = self.name().transpose() {
                    f.field("name", &field_name);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<AllocatorRef<'a>> for Allocator {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: AllocatorRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    name: value.name()?.map(::core::convert::Into::into),
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for AllocatorRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for AllocatorRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location(
                        "[AllocatorRef]",
                        "get",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<Allocator>> for Allocator {
            type Value = ::planus::Offset<Allocator>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<Allocator>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for AllocatorRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[AllocatorRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `RunData` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `RunData` in the file `schema/etdump_schema_flatcc.fbs:157`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct RunData {
            /// The field `name` in the table `RunData`
            pub name: ::core::option::Option<::planus::alloc::string::String>,
            /// The field `bundled_input_index` in the table `RunData`
            pub bundled_input_index: i32,
            /// The field `allocators` in the table `RunData`
            pub allocators: ::core::option::Option<::planus::alloc::vec::Vec<self::Allocator>>,
            /// The field `events` in the table `RunData`
            pub events: ::core::option::Option<::planus::alloc::vec::Vec<self::Event>>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for RunData {
            fn default() -> Self {
                Self {
                    name: ::core::default::Default::default(),
                    bundled_input_index: -1,
                    allocators: ::core::default::Default::default(),
                    events: ::core::default::Default::default(),
                }
            }
        }

        impl RunData {
            /// Creates a [RunDataBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> RunDataBuilder<()> {
                RunDataBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_name: impl ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
                field_bundled_input_index: impl ::planus::WriteAsDefault<i32, i32>,
                field_allocators: impl ::planus::WriteAsOptional<
                    ::planus::Offset<[::planus::Offset<self::Allocator>]>,
                >,
                field_events: impl ::planus::WriteAsOptional<
                    ::planus::Offset<[::planus::Offset<self::Event>]>,
                >,
            ) -> ::planus::Offset<Self> {
                let prepared_name = field_name.prepare(builder);
                let prepared_bundled_input_index = field_bundled_input_index.prepare(builder, &-1);
                let prepared_allocators = field_allocators.prepare(builder);
                let prepared_events = field_events.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<12> =
                    ::core::default::Default::default();
                if prepared_name.is_some() {
                    table_writer.write_entry::<::planus::Offset<str>>(0);
                }
                if prepared_bundled_input_index.is_some() {
                    table_writer.write_entry::<i32>(1);
                }
                if prepared_allocators.is_some() {
                    table_writer
                        .write_entry::<::planus::Offset<[::planus::Offset<self::Allocator>]>>(2);
                }
                if prepared_events.is_some() {
                    table_writer
                        .write_entry::<::planus::Offset<[::planus::Offset<self::Event>]>>(3);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_name) = prepared_name {
                            object_writer.write::<_, _, 4>(&prepared_name);
                        }
                        if let ::core::option::Option::Some(prepared_bundled_input_index) =
                            prepared_bundled_input_index
                        {
                            object_writer.write::<_, _, 4>(&prepared_bundled_input_index);
                        }
                        if let ::core::option::Option::Some(prepared_allocators) =
                            prepared_allocators
                        {
                            object_writer.write::<_, _, 4>(&prepared_allocators);
                        }
                        if let ::core::option::Option::Some(prepared_events) = prepared_events {
                            object_writer.write::<_, _, 4>(&prepared_events);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<RunData>> for RunData {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<RunData> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<RunData>> for RunData {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<RunData>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<RunData> for RunData {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<RunData> {
                RunData::create(
                    builder,
                    &self.name,
                    self.bundled_input_index,
                    &self.allocators,
                    &self.events,
                )
            }
        }

        /// Builder for serializing an instance of the [RunData] type.
        ///
        /// Can be created using the [RunData::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct RunDataBuilder<State>(State);

        impl RunDataBuilder<()> {
            /// Setter for the [`name` field](RunData#structfield.name).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name<T0>(self, value: T0) -> RunDataBuilder<(T0,)>
            where
                T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            {
                RunDataBuilder((value,))
            }

            /// Sets the [`name` field](RunData#structfield.name) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn name_as_null(self) -> RunDataBuilder<((),)> {
                self.name(())
            }
        }

        impl<T0> RunDataBuilder<(T0,)> {
            /// Setter for the [`bundled_input_index` field](RunData#structfield.bundled_input_index).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bundled_input_index<T1>(self, value: T1) -> RunDataBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsDefault<i32, i32>,
            {
                let (v0,) = self.0;
                RunDataBuilder((v0, value))
            }

            /// Sets the [`bundled_input_index` field](RunData#structfield.bundled_input_index) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn bundled_input_index_as_default(
                self,
            ) -> RunDataBuilder<(T0, ::planus::DefaultValue)> {
                self.bundled_input_index(::planus::DefaultValue)
            }
        }

        impl<T0, T1> RunDataBuilder<(T0, T1)> {
            /// Setter for the [`allocators` field](RunData#structfield.allocators).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocators<T2>(self, value: T2) -> RunDataBuilder<(T0, T1, T2)>
            where
                T2: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Allocator>]>>,
            {
                let (v0, v1) = self.0;
                RunDataBuilder((v0, v1, value))
            }

            /// Sets the [`allocators` field](RunData#structfield.allocators) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn allocators_as_null(self) -> RunDataBuilder<(T0, T1, ())> {
                self.allocators(())
            }
        }

        impl<T0, T1, T2> RunDataBuilder<(T0, T1, T2)> {
            /// Setter for the [`events` field](RunData#structfield.events).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn events<T3>(self, value: T3) -> RunDataBuilder<(T0, T1, T2, T3)>
            where
                T3: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Event>]>>,
            {
                let (v0, v1, v2) = self.0;
                RunDataBuilder((v0, v1, v2, value))
            }

            /// Sets the [`events` field](RunData#structfield.events) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn events_as_null(self) -> RunDataBuilder<(T0, T1, T2, ())> {
                self.events(())
            }
        }

        impl<T0, T1, T2, T3> RunDataBuilder<(T0, T1, T2, T3)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [RunData].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<RunData>
            where
                Self: ::planus::WriteAsOffset<RunData>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Allocator>]>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Event>]>>,
        > ::planus::WriteAs<::planus::Offset<RunData>> for RunDataBuilder<(T0, T1, T2, T3)>
        {
            type Prepared = ::planus::Offset<RunData>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<RunData> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Allocator>]>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Event>]>>,
        > ::planus::WriteAsOptional<::planus::Offset<RunData>>
            for RunDataBuilder<(T0, T1, T2, T3)>
        {
            type Prepared = ::planus::Offset<RunData>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<RunData>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsOptional<::planus::Offset<::core::primitive::str>>,
            T1: ::planus::WriteAsDefault<i32, i32>,
            T2: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Allocator>]>>,
            T3: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::Event>]>>,
        > ::planus::WriteAsOffset<RunData> for RunDataBuilder<(T0, T1, T2, T3)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<RunData> {
                let (v0, v1, v2, v3) = &self.0;
                RunData::create(builder, v0, v1, v2, v3)
            }
        }

        /// Reference to a deserialized [RunData].
        #[derive(Copy, Clone)]
        pub struct RunDataRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> RunDataRef<'a> {
            /// Getter for the [`name` field](RunData#structfield.name).
            #[inline]
            pub fn name(
                &self,
            ) -> ::planus::Result<::core::option::Option<&'a ::core::primitive::str>> {
                self.0.access(0, "RunData", "name")
            }

            /// Getter for the [`bundled_input_index` field](RunData#structfield.bundled_input_index).
            #[inline]
            pub fn bundled_input_index(&self) -> ::planus::Result<i32> {
                ::core::result::Result::Ok(
                    self.0
                        .access(1, "RunData", "bundled_input_index")?
                        .unwrap_or(-1),
                )
            }

            /// Getter for the [`allocators` field](RunData#structfield.allocators).
            #[inline]
            pub fn allocators(
                &self,
            ) -> ::planus::Result<
                ::core::option::Option<
                    ::planus::Vector<'a, ::planus::Result<self::AllocatorRef<'a>>>,
                >,
            > {
                self.0.access(2, "RunData", "allocators")
            }

            /// Getter for the [`events` field](RunData#structfield.events).
            #[inline]
            pub fn events(
                &self,
            ) -> ::planus::Result<
                ::core::option::Option<::planus::Vector<'a, ::planus::Result<self::EventRef<'a>>>>,
            > {
                self.0.access(3, "RunData", "events")
            }
        }

        impl<'a> ::core::fmt::Debug for RunDataRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("RunDataRef");
                if let ::core::option::Option::Some(field_name) = self.name().transpose() {
                    f.field("name", &field_name);
                }
                f.field("bundled_input_index", &self.bundled_input_index());
                if let ::core::option::Option::Some(field_allocators) =
                    self.allocators().transpose()
                {
                    f.field("allocators", &field_allocators);
                }
                if let ::core::option::Option::Some(field_events) = self.events().transpose() {
                    f.field("events", &field_events);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<RunDataRef<'a>> for RunData {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: RunDataRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    name: value.name()?.map(::core::convert::Into::into),
                    bundled_input_index: ::core::convert::TryInto::try_into(
                        value.bundled_input_index()?,
                    )?,
                    allocators: if let ::core::option::Option::Some(allocators) =
                        value.allocators()?
                    {
                        ::core::option::Option::Some(allocators.to_vec_result()?)
                    } else {
                        ::core::option::Option::None
                    },
                    events: if let ::core::option::Option::Some(events) = value.events()? {
                        ::core::option::Option::Some(events.to_vec_result()?)
                    } else {
                        ::core::option::Option::None
                    },
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for RunDataRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for RunDataRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[RunDataRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<RunData>> for RunData {
            type Value = ::planus::Offset<RunData>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<RunData>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for RunDataRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[RunDataRef]", "read_as_root", 0)
                })
            }
        }

        /// The table `ETDump` in the namespace `etdump`
        ///
        /// Generated from these locations:
        /// * Table `ETDump` in the file `schema/etdump_schema_flatcc.fbs:171`
        #[derive(Clone, Debug, PartialEq, PartialOrd)]
        pub struct EtDump {
            /// The field `version` in the table `ETDump`
            pub version: u32,
            /// The field `run_data` in the table `ETDump`
            pub run_data: ::core::option::Option<::planus::alloc::vec::Vec<self::RunData>>,
        }

        #[allow(clippy::derivable_impls)]
        impl ::core::default::Default for EtDump {
            fn default() -> Self {
                Self {
                    version: 0,
                    run_data: ::core::default::Default::default(),
                }
            }
        }

        impl EtDump {
            /// Creates a [EtDumpBuilder] for serializing an instance of this table.
            #[inline]
            pub fn builder() -> EtDumpBuilder<()> {
                EtDumpBuilder(())
            }

            #[allow(clippy::too_many_arguments)]
            pub fn create(
                builder: &mut ::planus::Builder,
                field_version: impl ::planus::WriteAsDefault<u32, u32>,
                field_run_data: impl ::planus::WriteAsOptional<
                    ::planus::Offset<[::planus::Offset<self::RunData>]>,
                >,
            ) -> ::planus::Offset<Self> {
                let prepared_version = field_version.prepare(builder, &0);
                let prepared_run_data = field_run_data.prepare(builder);

                let mut table_writer: ::planus::table_writer::TableWriter<8> =
                    ::core::default::Default::default();
                if prepared_version.is_some() {
                    table_writer.write_entry::<u32>(0);
                }
                if prepared_run_data.is_some() {
                    table_writer
                        .write_entry::<::planus::Offset<[::planus::Offset<self::RunData>]>>(1);
                }

                unsafe {
                    table_writer.finish(builder, |object_writer| {
                        if let ::core::option::Option::Some(prepared_version) = prepared_version {
                            object_writer.write::<_, _, 4>(&prepared_version);
                        }
                        if let ::core::option::Option::Some(prepared_run_data) = prepared_run_data {
                            object_writer.write::<_, _, 4>(&prepared_run_data);
                        }
                    });
                }
                builder.current_offset()
            }
        }

        impl ::planus::WriteAs<::planus::Offset<EtDump>> for EtDump {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<EtDump> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl ::planus::WriteAsOptional<::planus::Offset<EtDump>> for EtDump {
            type Prepared = ::planus::Offset<Self>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<EtDump>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl ::planus::WriteAsOffset<EtDump> for EtDump {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<EtDump> {
                EtDump::create(builder, self.version, &self.run_data)
            }
        }

        /// Builder for serializing an instance of the [EtDump] type.
        ///
        /// Can be created using the [EtDump::builder] method.
        #[derive(Debug)]
        #[must_use]
        pub struct EtDumpBuilder<State>(State);

        impl EtDumpBuilder<()> {
            /// Setter for the [`version` field](EtDump#structfield.version).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn version<T0>(self, value: T0) -> EtDumpBuilder<(T0,)>
            where
                T0: ::planus::WriteAsDefault<u32, u32>,
            {
                EtDumpBuilder((value,))
            }

            /// Sets the [`version` field](EtDump#structfield.version) to the default value.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn version_as_default(self) -> EtDumpBuilder<(::planus::DefaultValue,)> {
                self.version(::planus::DefaultValue)
            }
        }

        impl<T0> EtDumpBuilder<(T0,)> {
            /// Setter for the [`run_data` field](EtDump#structfield.run_data).
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn run_data<T1>(self, value: T1) -> EtDumpBuilder<(T0, T1)>
            where
                T1: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::RunData>]>>,
            {
                let (v0,) = self.0;
                EtDumpBuilder((v0, value))
            }

            /// Sets the [`run_data` field](EtDump#structfield.run_data) to null.
            #[inline]
            #[allow(clippy::type_complexity)]
            pub fn run_data_as_null(self) -> EtDumpBuilder<(T0, ())> {
                self.run_data(())
            }
        }

        impl<T0, T1> EtDumpBuilder<(T0, T1)> {
            /// Finish writing the builder to get an [Offset](::planus::Offset) to a serialized [EtDump].
            #[inline]
            pub fn finish(self, builder: &mut ::planus::Builder) -> ::planus::Offset<EtDump>
            where
                Self: ::planus::WriteAsOffset<EtDump>,
            {
                ::planus::WriteAsOffset::prepare(&self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u32, u32>,
            T1: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::RunData>]>>,
        > ::planus::WriteAs<::planus::Offset<EtDump>> for EtDumpBuilder<(T0, T1)>
        {
            type Prepared = ::planus::Offset<EtDump>;

            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<EtDump> {
                ::planus::WriteAsOffset::prepare(self, builder)
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u32, u32>,
            T1: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::RunData>]>>,
        > ::planus::WriteAsOptional<::planus::Offset<EtDump>> for EtDumpBuilder<(T0, T1)>
        {
            type Prepared = ::planus::Offset<EtDump>;

            #[inline]
            fn prepare(
                &self,
                builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<::planus::Offset<EtDump>> {
                ::core::option::Option::Some(::planus::WriteAsOffset::prepare(self, builder))
            }
        }

        impl<
            T0: ::planus::WriteAsDefault<u32, u32>,
            T1: ::planus::WriteAsOptional<::planus::Offset<[::planus::Offset<self::RunData>]>>,
        > ::planus::WriteAsOffset<EtDump> for EtDumpBuilder<(T0, T1)>
        {
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> ::planus::Offset<EtDump> {
                let (v0, v1) = &self.0;
                EtDump::create(builder, v0, v1)
            }
        }

        /// Reference to a deserialized [EtDump].
        #[derive(Copy, Clone)]
        pub struct EtDumpRef<'a>(#[allow(dead_code)] ::planus::table_reader::Table<'a>);

        impl<'a> EtDumpRef<'a> {
            /// Getter for the [`version` field](EtDump#structfield.version).
            #[inline]
            pub fn version(&self) -> ::planus::Result<u32> {
                ::core::result::Result::Ok(self.0.access(0, "EtDump", "version")?.unwrap_or(0))
            }

            /// Getter for the [`run_data` field](EtDump#structfield.run_data).
            #[inline]
            pub fn run_data(
                &self,
            ) -> ::planus::Result<
                ::core::option::Option<
                    ::planus::Vector<'a, ::planus::Result<self::RunDataRef<'a>>>,
                >,
            > {
                self.0.access(1, "EtDump", "run_data")
            }
        }

        impl<'a> ::core::fmt::Debug for EtDumpRef<'a> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut f = f.debug_struct("EtDumpRef");
                f.field("version", &self.version());
                if let ::core::option::Option::Some(field_run_data) = self.run_data().transpose() {
                    f.field("run_data", &field_run_data);
                }
                f.finish()
            }
        }

        impl<'a> ::core::convert::TryFrom<EtDumpRef<'a>> for EtDump {
            type Error = ::planus::Error;

            #[allow(unreachable_code)]
            fn try_from(value: EtDumpRef<'a>) -> ::planus::Result<Self> {
                ::core::result::Result::Ok(Self {
                    version: ::core::convert::TryInto::try_into(value.version()?)?,
                    run_data: if let ::core::option::Option::Some(run_data) = value.run_data()? {
                        ::core::option::Option::Some(run_data.to_vec_result()?)
                    } else {
                        ::core::option::Option::None
                    },
                })
            }
        }

        impl<'a> ::planus::TableRead<'a> for EtDumpRef<'a> {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                ::core::result::Result::Ok(Self(::planus::table_reader::Table::from_buffer(
                    buffer, offset,
                )?))
            }
        }

        impl<'a> ::planus::VectorReadInner<'a> for EtDumpRef<'a> {
            type Error = ::planus::Error;
            const STRIDE: usize = 4;

            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'a>,
                offset: usize,
            ) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(buffer, offset).map_err(|error_kind| {
                    error_kind.with_error_location("[EtDumpRef]", "get", buffer.offset_from_start)
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<::planus::Offset<EtDump>> for EtDump {
            type Value = ::planus::Offset<EtDump>;
            const STRIDE: usize = 4;
            #[inline]
            fn prepare(&self, builder: &mut ::planus::Builder) -> Self::Value {
                ::planus::WriteAs::prepare(self, builder)
            }

            #[inline]
            unsafe fn write_values(
                values: &[::planus::Offset<EtDump>],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 4];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - (Self::STRIDE * i) as u32,
                    );
                }
            }
        }

        impl<'a> ::planus::ReadAsRoot<'a> for EtDumpRef<'a> {
            fn read_as_root(slice: &'a [u8]) -> ::planus::Result<Self> {
                ::planus::TableRead::from_buffer(
                    ::planus::SliceWithStartOffset {
                        buffer: slice,
                        offset_from_start: 0,
                    },
                    0,
                )
                .map_err(|error_kind| {
                    error_kind.with_error_location("[EtDumpRef]", "read_as_root", 0)
                })
            }
        }
    }
    /// The namespace `executorch_flatbuffer`
    ///
    /// Generated from these locations:
    /// * File `schema/scalar_type.fbs`
    pub mod executorch_flatbuffer {
        /// The enum `ScalarType` in the namespace `executorch_flatbuffer`
        ///
        /// Generated from these locations:
        /// * Enum `ScalarType` in the file `schema/scalar_type.fbs:11`
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(i8)]
        pub enum ScalarType {
            /// The variant `BYTE` in the enum `ScalarType`
            Byte = 0,

            /// The variant `CHAR` in the enum `ScalarType`
            Char = 1,

            /// The variant `SHORT` in the enum `ScalarType`
            Short = 2,

            /// The variant `INT` in the enum `ScalarType`
            Int = 3,

            /// The variant `LONG` in the enum `ScalarType`
            Long = 4,

            /// The variant `HALF` in the enum `ScalarType`
            Half = 5,

            /// The variant `FLOAT` in the enum `ScalarType`
            Float = 6,

            /// The variant `DOUBLE` in the enum `ScalarType`
            Double = 7,

            /// The variant `BOOL` in the enum `ScalarType`
            Bool = 11,

            /// The variant `QINT8` in the enum `ScalarType`
            Qint8 = 12,

            /// The variant `QUINT8` in the enum `ScalarType`
            Quint8 = 13,

            /// The variant `QINT32` in the enum `ScalarType`
            Qint32 = 14,

            /// The variant `BFLOAT16` in the enum `ScalarType`
            Bfloat16 = 15,

            /// The variant `QUINT4X2` in the enum `ScalarType`
            Quint4x2 = 16,

            /// The variant `QUINT2X4` in the enum `ScalarType`
            Quint2x4 = 17,

            /// The variant `BITS16` in the enum `ScalarType`
            Bits16 = 22,

            /// The variant `FLOAT8E5M2` in the enum `ScalarType`
            Float8e5m2 = 23,

            /// The variant `FLOAT8E4M3FN` in the enum `ScalarType`
            Float8e4m3fn = 24,

            /// The variant `FLOAT8E5M2FNUZ` in the enum `ScalarType`
            Float8e5m2fnuz = 25,

            /// The variant `FLOAT8E4M3FNUZ` in the enum `ScalarType`
            Float8e4m3fnuz = 26,

            /// The variant `UINT16` in the enum `ScalarType`
            Uint16 = 27,

            /// The variant `UINT32` in the enum `ScalarType`
            Uint32 = 28,

            /// The variant `UINT64` in the enum `ScalarType`
            Uint64 = 29,
        }

        impl ScalarType {
            /// Array containing all valid variants of ScalarType
            pub const ENUM_VALUES: [Self; 23] = [
                Self::Byte,
                Self::Char,
                Self::Short,
                Self::Int,
                Self::Long,
                Self::Half,
                Self::Float,
                Self::Double,
                Self::Bool,
                Self::Qint8,
                Self::Quint8,
                Self::Qint32,
                Self::Bfloat16,
                Self::Quint4x2,
                Self::Quint2x4,
                Self::Bits16,
                Self::Float8e5m2,
                Self::Float8e4m3fn,
                Self::Float8e5m2fnuz,
                Self::Float8e4m3fnuz,
                Self::Uint16,
                Self::Uint32,
                Self::Uint64,
            ];
        }

        impl ::core::convert::TryFrom<i8> for ScalarType {
            type Error = ::planus::errors::UnknownEnumTagKind;
            #[inline]
            fn try_from(
                value: i8,
            ) -> ::core::result::Result<Self, ::planus::errors::UnknownEnumTagKind> {
                #[allow(clippy::match_single_binding)]
                match value {
                    0 => ::core::result::Result::Ok(ScalarType::Byte),
                    1 => ::core::result::Result::Ok(ScalarType::Char),
                    2 => ::core::result::Result::Ok(ScalarType::Short),
                    3 => ::core::result::Result::Ok(ScalarType::Int),
                    4 => ::core::result::Result::Ok(ScalarType::Long),
                    5 => ::core::result::Result::Ok(ScalarType::Half),
                    6 => ::core::result::Result::Ok(ScalarType::Float),
                    7 => ::core::result::Result::Ok(ScalarType::Double),
                    11 => ::core::result::Result::Ok(ScalarType::Bool),
                    12 => ::core::result::Result::Ok(ScalarType::Qint8),
                    13 => ::core::result::Result::Ok(ScalarType::Quint8),
                    14 => ::core::result::Result::Ok(ScalarType::Qint32),
                    15 => ::core::result::Result::Ok(ScalarType::Bfloat16),
                    16 => ::core::result::Result::Ok(ScalarType::Quint4x2),
                    17 => ::core::result::Result::Ok(ScalarType::Quint2x4),
                    22 => ::core::result::Result::Ok(ScalarType::Bits16),
                    23 => ::core::result::Result::Ok(ScalarType::Float8e5m2),
                    24 => ::core::result::Result::Ok(ScalarType::Float8e4m3fn),
                    25 => ::core::result::Result::Ok(ScalarType::Float8e5m2fnuz),
                    26 => ::core::result::Result::Ok(ScalarType::Float8e4m3fnuz),
                    27 => ::core::result::Result::Ok(ScalarType::Uint16),
                    28 => ::core::result::Result::Ok(ScalarType::Uint32),
                    29 => ::core::result::Result::Ok(ScalarType::Uint64),

                    _ => ::core::result::Result::Err(::planus::errors::UnknownEnumTagKind {
                        tag: value as i128,
                    }),
                }
            }
        }

        impl ::core::convert::From<ScalarType> for i8 {
            #[inline]
            fn from(value: ScalarType) -> Self {
                value as i8
            }
        }

        /// # Safety
        /// The Planus compiler correctly calculates `ALIGNMENT` and `SIZE`.
        unsafe impl ::planus::Primitive for ScalarType {
            const ALIGNMENT: usize = 1;
            const SIZE: usize = 1;
        }

        impl ::planus::WriteAsPrimitive<ScalarType> for ScalarType {
            #[inline]
            fn write<const N: usize>(&self, cursor: ::planus::Cursor<'_, N>, buffer_position: u32) {
                (*self as i8).write(cursor, buffer_position);
            }
        }

        impl ::planus::WriteAs<ScalarType> for ScalarType {
            type Prepared = Self;

            #[inline]
            fn prepare(&self, _builder: &mut ::planus::Builder) -> ScalarType {
                *self
            }
        }

        impl ::planus::WriteAsDefault<ScalarType, ScalarType> for ScalarType {
            type Prepared = Self;

            #[inline]
            fn prepare(
                &self,
                _builder: &mut ::planus::Builder,
                default: &ScalarType,
            ) -> ::core::option::Option<ScalarType> {
                if self == default {
                    ::core::option::Option::None
                } else {
                    ::core::option::Option::Some(*self)
                }
            }
        }

        impl ::planus::WriteAsOptional<ScalarType> for ScalarType {
            type Prepared = Self;

            #[inline]
            fn prepare(
                &self,
                _builder: &mut ::planus::Builder,
            ) -> ::core::option::Option<ScalarType> {
                ::core::option::Option::Some(*self)
            }
        }

        impl<'buf> ::planus::TableRead<'buf> for ScalarType {
            #[inline]
            fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'buf>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::ErrorKind> {
                let n: i8 = ::planus::TableRead::from_buffer(buffer, offset)?;
                ::core::result::Result::Ok(::core::convert::TryInto::try_into(n)?)
            }
        }

        impl<'buf> ::planus::VectorReadInner<'buf> for ScalarType {
            type Error = ::planus::errors::UnknownEnumTag;
            const STRIDE: usize = 1;
            #[inline]
            unsafe fn from_buffer(
                buffer: ::planus::SliceWithStartOffset<'buf>,
                offset: usize,
            ) -> ::core::result::Result<Self, ::planus::errors::UnknownEnumTag> {
                let value = unsafe { *buffer.buffer.get_unchecked(offset) as i8 };
                let value: ::core::result::Result<Self, _> =
                    ::core::convert::TryInto::try_into(value);
                value.map_err(|error_kind| {
                    error_kind.with_error_location(
                        "ScalarType",
                        "VectorRead::from_buffer",
                        buffer.offset_from_start,
                    )
                })
            }
        }

        /// # Safety
        /// The planus compiler generates implementations that initialize
        /// the bytes in `write_values`.
        unsafe impl ::planus::VectorWrite<ScalarType> for ScalarType {
            const STRIDE: usize = 1;

            type Value = Self;

            #[inline]
            fn prepare(&self, _builder: &mut ::planus::Builder) -> Self {
                *self
            }

            #[inline]
            unsafe fn write_values(
                values: &[Self],
                bytes: *mut ::core::mem::MaybeUninit<u8>,
                buffer_position: u32,
            ) {
                let bytes = bytes as *mut [::core::mem::MaybeUninit<u8>; 1];
                for (i, v) in ::core::iter::Iterator::enumerate(values.iter()) {
                    ::planus::WriteAsPrimitive::write(
                        v,
                        ::planus::Cursor::new(unsafe { &mut *bytes.add(i) }),
                        buffer_position - i as u32,
                    );
                }
            }
        }
    }
}
